/* ember — amp/ internals shared with the layers above (not installed). */
#ifndef EMBER_AMP_INTERNAL_H
#define EMBER_AMP_INTERNAL_H

#include <stdbool.h>

/* True when a live, enabled GradScaler has scaled a loss since its last
 * unscale_ or update, i.e. gradients made from that loss still carry the
 * scale; *scale (may be NULL) gets that scale. With several optimizers on one
 * scaler, the first unscale_ clears it (a warning heuristic, not a guarantee). */
bool em__grad_scaler_pending(double *scale);

#endif
