/* ember — the registry of model families: the one file that names them
 * all. A family (nn_internal.h em__arch) is one file of its own; adding one
 * is an X(<x>) in EM__FAMILIES (and its file in nn/meson.build; if it wants
 * typed loaders, two wrappers below and their declarations in nn.h).
 * pretrained.c gets the registry as an argument and names none. */
#include "nn/nn_internal.h"

/* One X(<x>) per family, whose file defines `const em__arch em__<x>_arch`.
 * distilbert before bert: the "architectures" hint matches class-name prefixes. */
#define EM__FAMILIES(X) X(distilbert) X(bert) X(roberta)

#define DECLARE(x) extern const em__arch em__##x##_arch;
EM__FAMILIES(DECLARE)
#undef DECLARE
#define ROW(x) &em__##x##_arch,
static const em__arch *const registry[] = {EM__FAMILIES(ROW)};
#undef ROW
static const em__families all = {registry, (int)(sizeof registry / sizeof *registry)};

em_status em_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_module **out,
                                    em_load_report *report)
{
    return em__from_pretrained(&all, dir, opts, NULL, EM__HEAD_SEQCLS, out, report);
}

/* ---- typed loaders: one family each ---- */
em_status em_distilbert_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts,
                                               em_distilbert_seqcls **out, em_load_report *report)
{
    return em__from_pretrained(&all, dir, opts, &em__distilbert_arch, EM__HEAD_SEQCLS, (em_module **)out, report);
}
em_status em_distilbert_model_from_pretrained(const char *dir, const em_pretrained_opts *opts,
                                              em_distilbert_model **out, em_load_report *report)
{
    return em__from_pretrained(&all, dir, opts, &em__distilbert_arch, EM__HEAD_BASE, (em_module **)out, report);
}
em_status em_bert_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_bert_seqcls **out,
                                         em_load_report *report)
{
    return em__from_pretrained(&all, dir, opts, &em__bert_arch, EM__HEAD_SEQCLS, (em_module **)out, report);
}
em_status em_bert_model_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_bert_model **out,
                                        em_load_report *report)
{
    return em__from_pretrained(&all, dir, opts, &em__bert_arch, EM__HEAD_BASE, (em_module **)out, report);
}
