/** @file
 * ember — amp/: autocast regions and dynamic loss scaling (DESIGN.md §3 "amp").
 *
 * ---- Autocast ----------------------------------------------------------------
 * Inside an autocast region each op runs in the dtype its policy names,
 * whatever dtype its inputs arrive in; the casts are ordinary recorded ops
 * (em_to_dtype), so autograd differentiates through them and gradients reach
 * the f32 master weights in f32. The policy (per op, one table):
 *   - low precision (the region's dtype, bf16 or f16): matmul, and so every
 *     linear layer and both products of attention;
 *   - f32: softmax, log_softmax, layer_norm, cross_entropy (the losses), the
 *     reductions sum/mean/var/logsumexp/norm, and exp, log, pow, rsqrt. This
 *     is PyTorch's CUDA list, and stricter than its CPU list (which lets
 *     softmax, layer_norm, exp, pow and sum run in bf16) on purpose, on every
 *     device: the numerically touchy ops never see 8-bit mantissas;
 *   - every other op runs in the dtype it is given. A binary op given f32
 *     and a 16-bit float computes in f32 (torch's promotion), in and out of
 *     regions; f64 is never cast.
 * Weights are cast once per region: a cast of an f32 tensor to the low dtype
 * is cached, keyed by its storage, geometry and storage version (an in-place
 * update, such as an optimizer step, makes the next use cast again). The
 * cache drops an entry as soon as nothing but the cache holds its source, and
 * is emptied when the outermost region ends. Casts made in no-grad mode of a
 * tensor that carries autograd history are cached apart: served only to later
 * no-grad uses (an inference loop in one region casts each weight once), never
 * to a grad-mode forward (PyTorch serves them to both, and a grad-mode forward
 * after a no-grad one in the same region then loses gradients). The grad mode
 * comes from autograd through tensor/hooks.h's em__grad_mode_hook.
 *
 * Regions nest: an inner region may switch the dtype, and a region of EM_F32
 * turns autocast off inside it (torch's autocast(enabled=False)). The state
 * is per thread. Backward normally runs after the region; run inside one, its
 * ops follow the same policy.
 *
 * Ownership: casts follow the op rules (owned by the current scope); a cast
 * made outside any scope belongs to the region and is released when the
 * outermost region ends. Outputs of ops keep the op's dtype: a model wrapper
 * returns em_autocast_output_f32(out) so that callers see f32.
 *
 * CPU speed: bf16 matmuls run through oneDNN with f32 accumulation where the
 * CPU has AVX-512 BF16 (about 2x the f32 rate), and agree with f32 within
 * 1e-2 relative. f16 matmuls on the CPU convert to f32 and compute in f32:
 * that is emulation, for correctness and for testing fp16 loss scaling, not
 * for speed.
 *
 * ---- GradScaler ---------------------------------------------------------------
 * torch.amp.GradScaler, exactly (reference §5.1): the scale starts at
 * init_scale (2^16), is multiplied by backoff_factor (0.5) after any step
 * whose gradients held an inf or NaN, and by growth_factor (2) after
 * growth_interval (2000) consecutive clean steps (unless that overflows f32).
 * The scale is stored as f32 and updated with torch's arithmetic; unscaling
 * multiplies each gradient by float(1 / double(scale)). It works on the CPU
 * too: Accelerate silently ignores fp16 on the CPU; ember does not.
 *
 * The scaler only scales: tensors in, flags out. It scales a loss, unscales
 * the gradients it is given (recording found_inf under a key, normally the
 * optimizer's address, which it never dereferences) and updates its scale;
 * whoever owns the loop decides whether to step (the Accelerator does; by
 * hand it is llm.c's three lines):
 *
 *     int n;
 *     em_tensor **g = em_optimizer_grads(opt, &n);         // optim.h
 *     bool ok;
 *     em_grad_scaler_prepare_step(scaler, opt, n, g, &ok);  // torch's scaler.step(opt), minus the step
 *     if (ok) em_optimizer_step(opt);
 *     em_grad_scaler_update(scaler);
 *     free(g);
 *
 * So amp/ calls neither autograd nor optim (the layers above it). torch's
 * scaler.unscale_(opt) / scaler.step(opt) are these lines, as
 * em_grad_scaler_unscale_ / em_grad_scaler_step in distributed.h.
 *
 * Misuse (aborts through the handler) uses torch's messages, e.g.
 * "unscale_() has already been called on this optimizer since the last
 * update().". Outside failures return an em_status.
 */
#ifndef EMBER_AMP_H
#define EMBER_AMP_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- autocast ------------------------------------------------------------------ */
/** Opens a region on this thread: dtype EM_BF16 or EM_F16 runs matmul-class
 * ops in it; EM_F32 turns autocast off until the matching end. Misuse for
 * any other dtype. */
void em_autocast_begin(em_dtype dtype);
/** Closes the innermost region; the outermost one also empties the cast cache. */
void em_autocast_end(void);
/** EM_AUTOCAST_REGION(EM_BF16) { ... } — do not return/break out of the block. */
#define EM_AUTOCAST_REGION(dtype) \
    for (int em__ac_ = (em_autocast_begin(dtype), 0); !em__ac_; em__ac_ = (em_autocast_end(), 1))

bool em_autocast_enabled(void);    /**< inside a region whose dtype is not f32 */
em_dtype em_autocast_dtype(void);  /**< the innermost region's dtype; EM_F32 outside */
int em_autocast_depth(void);       /**< open regions on this thread */

/** t as f32 (a recorded cast when t is bf16/f16, else t itself with one more
 * reference), owned by the current scope: a model's outputs in f32. */
em_tensor *em_autocast_output_f32(em_tensor *t);

/** Counters of this thread, for tests and teaching. casts: casts the policy
 * made (cached or not); cache_hits: uses served by the cache; cached: live
 * cache entries now; regions: bf16/f16 regions ever opened (not reset). */
typedef struct em_autocast_stats {
    /** @{ */
    int64_t casts, cache_hits, cached, regions;   /**< as described above */
    /** @} */
} em_autocast_stats;
/** This thread's counters now. */
em_autocast_stats em_autocast_stats_get(void);
void em_autocast_stats_reset(void);   /**< zeroes casts and cache_hits */

/* ---- GradScaler ------------------------------------------------------------------ */
/** A dynamic loss scaler (torch.amp.GradScaler); made by em_grad_scaler_new,
 * freed by em_grad_scaler_free. One per training loop; not thread-safe. */
typedef struct em_grad_scaler em_grad_scaler;

/** Zero fields take torch's defaults: init_scale 2^16, growth_factor 2,
 * backoff_factor 0.5, growth_interval 2000. disabled: every call passes
 * through (scale returns the loss, step just steps), as torch's enabled=False.
 * Misuse: growth_factor <= 1 ("The growth factor must be > 1.0."),
 * backoff_factor >= 1 ("The backoff factor must be < 1.0."), or a
 * growth_interval or init_scale <= 0. */
typedef struct em_grad_scaler_opts {
    double init_scale;         /**< first scale; 0 -> 65536 */
    double growth_factor;      /**< 0 -> 2 */
    double backoff_factor;     /**< 0 -> 0.5 */
    int64_t growth_interval;   /**< clean steps before growing; 0 -> 2000 */
    bool disabled;             /**< pass-through scaler */
} em_grad_scaler_opts;

em_grad_scaler *em_grad_scaler_new(const em_grad_scaler_opts *opts);   /**< opts may be NULL; NULL on OOM */
void em_grad_scaler_free(em_grad_scaler *s);                            /**< NULL is ok */

/** loss * scale, a recorded op owned by the current scope (loss itself, one
 * more reference, when disabled). Backward from it gives scaled gradients. */
em_tensor *em_grad_scaler_scale(em_grad_scaler *s, em_tensor *loss);
/** Divides the n gradients (NULL entries are skipped) by the scale, in
 * place, and records under key whether any held an inf or NaN. One fused
 * OpenMP pass per run of gradients that are adjacent views of one buffer (a
 * flat gradient buffer: one pass in all); other gradients (another device,
 * odd strides) go through ops. f16 gradients are misuse ("Attempting to
 * unscale FP16 gradients.": master weights must be f32). Misuse when key was
 * unscaled or stepped since the last update. Unscale before clipping. */
em_status em_grad_scaler_unscale_grads(em_grad_scaler *s, const void *key, int n, em_tensor *const *grads);
/** torch's scaler.step(optimizer) without the step: unscales the gradients
 * (unless key was unscaled since the last update), marks key stepped and sets
 * *step to whether no inf or NaN was found; the caller then steps its
 * optimizer only when *step (and, when it did not, does not step the LR
 * scheduler either). A disabled scaler sets *step = true. Misuse when key
 * was already stepped before update(), or when no gradient was given ("No
 * inf checks were recorded for this optimizer."). */
em_status em_grad_scaler_prepare_step(em_grad_scaler *s, const void *key, int n, em_tensor *const *grads, bool *step);
/** Whether key's gradients were unscaled (and not yet stepped) since the last update. */
bool em_grad_scaler_is_unscaled(const em_grad_scaler *s, const void *key);
/** Whether a loss scaled since the last unscale or update may have left
 * gradients that still carry the scale (*scale, may be NULL, gets it): the
 * owner of the loop uses it to warn about clipping before unscaling. */
bool em_grad_scaler_grads_scaled(const em_grad_scaler *s, double *scale);
/** Backs off or grows the scale from the steps since the last update, and
 * forgets them. Misuse when no optimizer was unscaled or stepped since the
 * last update ("No inf checks were recorded prior to update."). */
void em_grad_scaler_update(em_grad_scaler *s);
/** torch's update(new_scale): sets the scale (rounded to f32), leaves the
 * growth tracker, forgets the steps. */
void em_grad_scaler_update_to(em_grad_scaler *s, double new_scale);
/** Whether key's last em_grad_scaler_prepare_step (kept across update) said not to step. */
bool em_grad_scaler_step_was_skipped(const em_grad_scaler *s, const void *key);
bool em_grad_scaler_is_enabled(const em_grad_scaler *s);   /**< false for a disabled scaler (or NULL) */
double em_grad_scaler_get_scale(const em_grad_scaler *s);   /**< 1.0 when disabled */
int64_t em_grad_scaler_growth_tracker(const em_grad_scaler *s);   /**< clean steps since the last growth or backoff; 0 when disabled */
double em_grad_scaler_get_growth_factor(const em_grad_scaler *s);   /**< the resolved growth_factor */
double em_grad_scaler_get_backoff_factor(const em_grad_scaler *s);  /**< the resolved backoff_factor */
int64_t em_grad_scaler_get_growth_interval(const em_grad_scaler *s); /**< the resolved growth_interval */
/** Sets growth_factor for later updates; unchecked, as torch's setter. */
void em_grad_scaler_set_growth_factor(em_grad_scaler *s, double v);
/** Sets backoff_factor for later updates; unchecked, as torch's setter. */
void em_grad_scaler_set_backoff_factor(em_grad_scaler *s, double v);
/** Sets growth_interval for later updates; unchecked, as torch's setter. */
void em_grad_scaler_set_growth_interval(em_grad_scaler *s, int64_t v);

/** torch's state_dict(): the five values (all zero, enabled = false, for a
 * disabled scaler, whose torch state_dict is empty). */
typedef struct em_grad_scaler_state {
    bool enabled;                                  /**< false: every other field is 0 */
    /** @{ */
    double scale, growth_factor, backoff_factor;   /**< the scale and the update factors */
    /** @} */
    /** @{ */
    int64_t growth_interval, growth_tracker;       /**< the interval and the clean-step count */
    /** @} */
} em_grad_scaler_state;
/** s's state now (all zero for a disabled scaler or NULL). */
em_grad_scaler_state em_grad_scaler_state_dict(const em_grad_scaler *s);
/** torch's load_state_dict: a no-op on a disabled scaler; a state from a
 * disabled one is EM_ERR_INVALID ("The source state dict is empty, possibly
 * because it was saved from a disabled instance of GradScaler."). */
em_status em_grad_scaler_load_state_dict(em_grad_scaler *s, const em_grad_scaler_state *st);
/** The state as a safetensors file with no tensors, like the schedulers':
 * metadata "format" = "ember.grad_scaler/1", "enabled", and (when enabled)
 * "scale", "growth_factor", "backoff_factor", "growth_interval",
 * "_growth_tracker" (torch's keys; 17 significant digits). Atomic write.
 * Loading a malformed file is EM_ERR_FORMAT and leaves the scaler unchanged. */
em_status em_grad_scaler_state_save(const em_grad_scaler *s, const char *path);
/** Reads a file written by em_grad_scaler_state_save into s (as
 * em_grad_scaler_load_state_dict); I/O and format errors name path. */
em_status em_grad_scaler_state_load(em_grad_scaler *s, const char *path);

#ifndef EMBER_BUILDING
#include "amp/amp_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
