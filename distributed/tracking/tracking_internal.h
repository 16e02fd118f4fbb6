/* ember — distributed/tracking/: internals. Not installed.
 *
 * Tracking sits apart from the Accelerator: it never calls it. The one thing
 * it needs from one, whether this process is its main process, comes through
 * a probe that the Accelerator installs when it is made (a hook from above,
 * as docs/ARCHITECTURE.md "The layers" lists them). */
#ifndef EMBER_TRACKING_INTERNAL_H
#define EMBER_TRACKING_INTERNAL_H

#include "distributed/tracking/tracking.h"

/* Set by em_accelerator_new (so it is set before any accelerator exists to
 * be passed here): whether acc's process is its main process. */
extern bool (*em__tracking_main_probe)(const struct em_accelerator *acc);

/* True when this process writes: acc NULL (no accelerator: a world of its
 * own), or acc's main process. */
bool em__tracking_is_main(const struct em_accelerator *acc);

#endif
