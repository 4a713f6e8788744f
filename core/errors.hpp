// Error types. Every user-facing failure becomes exactly one line on stderr and a non-zero exit:
//   UsageError / ConfigError / InputError  -> exit 2 (bad command line, config, data, checkpoint)
//   RuntimeFailure                         -> exit 1 (the run itself failed: divergence, I/O)
//   InternalError                          -> exit 1 (a bug in kktrain)
#pragma once

#include <stdexcept>
#include <string>

namespace kktrain {

class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, int exit_code) : std::runtime_error(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg, 2) {}
};

// A config problem: `key` is the dotted key path, `where` the source location ("file:line:col"
// or "override 'x=y'"), either may be empty.
class ConfigError : public Error {
 public:
  ConfigError(const std::string& key, const std::string& msg, const std::string& where = "")
      : Error(format(key, msg, where), 2), key_(key) {}
  const std::string& key() const { return key_; }

 private:
  static std::string format(const std::string& key, const std::string& msg,
                            const std::string& where) {
    std::string s = key.empty() ? msg : key + ": " + msg;
    if (!where.empty()) s += " (" + where + ")";
    return s;
  }
  std::string key_;
};

// Bad data files, checkpoints, or other inputs that are not the config itself.
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg, 2) {}
};

class RuntimeFailure : public Error {
 public:
  explicit RuntimeFailure(const std::string& msg) : Error(msg, 1) {}
};

// A failure every rank agreed on (parallel/agree.hpp): the rank that saw it first carries its
// message and prints it; the others carry an empty message and exit with the same status
// quietly. No rank aborts the job: all of them leave MPI normally.
class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& msg, int exit_code) : Error(msg, exit_code) {}
  bool printed_here() const { return what()[0] != '\0'; }
};

class InternalError : public Error {
 public:
  explicit InternalError(const std::string& msg) : Error("internal error: " + msg, 1) {}
};

}  // namespace kktrain
