/* ember — data/: internals shared by the batch schedule (sampler.c), collate
 * (collate.c) and the DataLoader (loader.c). Not installed. */
#ifndef EMBER_DATA_LOADER_INTERNAL_H
#define EMBER_DATA_LOADER_INTERNAL_H

#include "data/data.h"

/* Copies opts (NULL: all defaults) into *out with every zero replaced by its
 * documented default (batch_size 1, num_processes 1, prefetch_factor 2,
 * even_batches ON, seed em_get_seed()), after checking them: EM_ERR_INVALID
 * with a message naming the option otherwise. */
em_status em__dl_resolve(const em_dataloader_opts *opts, em_dataloader_opts *out);
/* Batches per epoch for rank out->process_index (exact), for resolved options. */
int64_t em__schedule_count(int64_t dataset_len, const em_dataloader_opts *resolved);
/* The longest batch the schedule can hold: batch_size, or batch_size / P with split_batches. */
int64_t em__schedule_max_rows(const em_dataloader_opts *resolved);

/* em_collate without the scope handling: the tensors are made in the calling
 * thread's current scope (unowned on a worker thread, which has none). On
 * failure *out is zeroed, and tensors already made are released when no
 * scope is open (inside one, the scope frees them). */
em_status em__collate_raw(const em_sample *samples, int64_t n, int64_t pad_to_multiple_of, int64_t pad_id,
                          em_batch *out);
/* em_keep of each tensor b has (NULL fields skipped); false when one failed (OOM). */
bool em__batch_keep(em_batch *b);

#endif
