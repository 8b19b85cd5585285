/* foreach family of the lowering table (see lowering.h). */
#include "emit.h"
#include "lowering.h"

/* Rows are added as lowerings land; an empty table sends every op of the
 * family to the CPU fallback. A zero-length array is not valid C, hence the
 * sentinel-free count below. */
const tpu_lowering_t tpu_lowerings_foreach[1] = {{"", NULL, 0}};
const size_t tpu_lowerings_foreach_count = 0;
