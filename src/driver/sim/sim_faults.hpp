// sim_faults.hpp (internal) — the simulated device's fault injection: for each driver call, the
// next `count` calls after `skip` successful ones fail with a chosen status and do nothing
// (sim_driver::fail_next). Used by sim_driver::state::run under the sim's mutex; see Note [Sim calls].
#pragma once

#include <array>
#include <cstddef>

#include "driver/sim/sim_common.hpp"

namespace streampool::sim {

class fault_injector {
 public:
  /// Arms `call`: after `skip` successful calls, the next `count` fail with `code`.
  void arm(driver_call call, int count, status code, int skip) noexcept {
    faults_[static_cast<std::size_t>(call)] = {skip, count, code};
    armed_ = true;
  }
  void clear() noexcept {
    faults_.fill({});
    armed_ = false;
  }
  /// Runs `body` for a call of `call`, unless an armed fault fires first: then the call does
  /// nothing at all (not even validation) and fails with the fault's status.
  template <class Body>
  drv_result apply(driver_call call, Body&& body) {
    if (!armed_) {
      return body();
    }
    fault_rec& fault = faults_[static_cast<std::size_t>(call)];
    if (fault.count > 0 && fault.skip == 0) {
      --fault.count;
      return fail(fault.code, reason_injected);
    }
    const drv_result result = body();
    if (result.ok() && fault.skip > 0) {
      --fault.skip;  // only successful calls count towards `skip`
    }
    return result;
  }

 private:
  struct fault_rec {
    int skip = 0;
    int count = 0;
    status code = status::out_of_memory;
  };
  bool armed_ = false;
  std::array<fault_rec, driver_call_count> faults_{};
};

}  // namespace streampool::sim
