#include "common/fs_options.h"  // IWYU pragma: export (moved to common: the controller checks mkfsOptions too)
