#include "apps/app_model.hpp"
#include "apps/commands.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace kktrain {

Config load_app_config(const ParsedArgs& args, const AppContext& ctx, int world_size) {
  LoadOptions opts;
  opts.world_size = world_size > 0 ? world_size : ctx.mpi->size();
  opts.checkpoint_dtype = model_file_dtype;
  opts.model_file_architecture = model_file_architecture;
  return load_config(args.positionals.at(0), args.overrides, opts);
}

void check_output_file(const std::string& opt, const std::string& out,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  std::error_code ec;
  const std::filesystem::path p(out);
  if (out.empty()) throw UsageError(opt + ": an output file name is required");
  if (std::filesystem::is_directory(p, ec)) {
    throw UsageError(opt + ": '" + out + "' is a directory; give a file name");
  }
  for (const auto& [what, path] : inputs) {
    if (!path.empty() && same_file(out, path)) {
      throw UsageError(opt + ": '" + out + "' is the " + what +
                       "; refusing to write over an input");
    }
  }
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(opt + ": cannot write '" + out + "': directory '" + dir.string() +
                     "' does not exist");
  }
  const bool exists = std::filesystem::exists(p, ec);
  if (exists && !std::filesystem::is_regular_file(p, ec)) {
    throw UsageError(opt + ": '" + out + "' exists and is not a regular file");
  }
  if (::access(exists ? out.c_str() : dir.c_str(), W_OK) != 0) {
    throw UsageError(opt + ": cannot write '" + out + "': " + std::strerror(errno));
  }
  // The file is written under a temporary name beside it and renamed over it: the directory must
  // take a new file (not so in /proc or /sys, whose files can only be written in place).
  const std::string probe = (dir / (".kktrain-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw UsageError(opt + ": cannot create a file in '" + dir.string() + "' to write '" + out +
                     "': " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace kktrain
