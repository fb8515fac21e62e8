#include "common/fault_points.h"  // IWYU pragma: export (moved to common; kept for the node's includes)
