// The kktrain subcommands. Each cmd_*.cpp defines one; main.cpp dispatches.
#pragma once

#include <string>
#include <vector>

#include "apps/cli/cli.hpp"
#include "core/config.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

struct AppContext {
  MpiRuntime* mpi = nullptr;
  std::string threads;  // the thread plan of a computing command, for its start-up log
  // Its warning when the thread settings oversubscribe the CPUs or were clamped to a rank's share
  // (parallel/threads.hpp), printed with the plan: once the inputs are valid, so that a bad
  // input is still one line.
  std::string threads_warning;
};

using CommandFn = int (*)(const ParsedArgs&, AppContext&);

struct Command {
  CommandSpec spec;
  CommandFn run;
  bool needs_kokkos;  // initialize Kokkos before running
};

Command config_command();
Command audit_command();
Command grads_command();
Command train_command();
Command export_command();
Command inspect_command();
Command generate_command();
Command tokenize_command();
Command render_command();
Command eval_command();

// Loads CONFIG (positional 0) with the overrides, for this process's world size (or
// `world_size` ranks when positive), resolving `model.dtype: auto` with `model.init_from`
// through the checkpoint reader.
Config load_app_config(const ParsedArgs& args, const AppContext& ctx, int world_size = 0);

// load_app_config on every rank of `comm`, agreed: ranks started with different configurations
// (an MPMD launch, a config file edited between the ranks' starts) stop with one line naming the
// first key that differs, and a config only some ranks could read stops every rank with the
// lowest such rank's error. A config every rank refuses is that error, said once (rank 0).
Config load_agreed_config(const ParsedArgs& args, const AppContext& ctx, Communicator& comm);

}  // namespace kktrain
