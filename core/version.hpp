// The kktrain version (printed by --version, written into every file kktrain makes).
#pragma once

namespace kktrain {

inline constexpr const char* kKktrainVersion = "0.1.0";

}  // namespace kktrain
