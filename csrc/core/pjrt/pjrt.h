/* The PJRT layer: the only part of torchtpu that includes pjrt_c_api.h
 * (and only in its .c files). */
#ifndef TORCHTPU_CORE_PJRT_PJRT_H_
#define TORCHTPU_CORE_PJRT_PJRT_H_
#include "buffer.h"
#include "client.h"
#include "compile_options.h"
#include "device.h"
#include "event.h"
#include "executable.h"
#include "plugin.h"
#endif
