/* torchtpu's version, for the C core. It is part of every persistent cache
 * key, so entries written by another release are never loaded. Keep it equal
 * to torchtpu/__init__.py's __version__ (tests/test_cache.py checks). */
#ifndef TORCHTPU_CORE_VERSION_H_
#define TORCHTPU_CORE_VERSION_H_

#define TPU_VERSION "0.1.0"

#endif
