/* libgiant.so's own source: the layers it bundles come in whole from their
 * static libraries (CMakeLists.txt); this says which version they are. */
#include "giant/giant.h"

const char *gt_version(void) { return GIANT_VERSION_STRING; }
