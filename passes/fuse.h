#pragma once
// Moved to include/hypatia/fuse.h (the installed C++ API). This forwarder stays only until
// apps/hypatia_run.cpp, which issue 36's item 6 is rewriting on another branch, includes
// <hypatia/fuse.h>; delete it then.
#include <hypatia/fuse.h>
