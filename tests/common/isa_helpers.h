// The CPU kernels' paths (kernels/cpu/simd.h) in tests: a test written once runs on each path this CPU can execute,
// and a path the CPU lacks is skipped with a line saying so.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/simd.h"

namespace kvscope::testutil {

/// A parameterized test's name for a path: "scalar", "avx2", "avx512".
inline std::string isaParamName(const ::testing::TestParamInfo<kernels::Isa>& info) {
  return kernels::isaName(info.param);
}

}  // namespace kvscope::testutil

/// Skips the test where this CPU cannot run path `p`, naming what it can; else runs the rest on `p` (restored after).
#define KVS_RUN_ON_ISA(p)                                                                                             \
  if ((p) > ::kvscope::kernels::bestIsa())                                                                            \
    GTEST_SKIP() << "this CPU has no " << ::kvscope::kernels::isaName(p)                                              \
                 << " path (the best it runs: " << ::kvscope::kernels::isaName(::kvscope::kernels::bestIsa()) << ")"; \
  const ::kvscope::kernels::IsaScope kvsIsaScope_(p)
