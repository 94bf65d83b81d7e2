// streampool/streampool.hpp — the umbrella header: the whole public C++ API in one include.
// (cuda_mr_resource.hpp and thrust_allocator.hpp are left out: they need CCCL headers and a CUDA
// compiler setting of their own; include them directly where you use cuda::mr or Thrust.)
#pragma once

#include "streampool/allocator.hpp"
#include "streampool/config.hpp"
#include "streampool/driver.hpp"
#include "streampool/errors.hpp"
#include "streampool/export.h"
#include "streampool/graph.hpp"
#include "streampool/host_allocator.hpp"
#include "streampool/pools.hpp"
#include "streampool/process_allocator.hpp"
#include "streampool/replay.hpp"
#include "streampool/sim_driver.hpp"
#include "streampool/stats.hpp"
