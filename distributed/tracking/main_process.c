/* ember — which process writes the progress bar, the logs and the event
 * files (tracking_internal.h): the main process of the accelerator given, as
 * its own probe says. */
#include "distributed/tracking/tracking_internal.h"

bool (*em__tracking_main_probe)(const struct em_accelerator *acc);

bool em__tracking_is_main(const struct em_accelerator *acc)
{
    return !acc || !em__tracking_main_probe || em__tracking_main_probe(acc);
}
