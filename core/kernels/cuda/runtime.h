// Small CUDA runtime helpers for the ATen glue (kernels/*.cpp): no CUDA header is seen by the callers.
#pragma once

namespace kvscope::kernels::cuda {

/// Makes `device` current for the scope and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

/// Throws std::runtime_error naming `what` when the last launch or call failed.
void checkLastError(const char* what);

}  // namespace kvscope::kernels::cuda
