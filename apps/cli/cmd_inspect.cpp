// `kktrain inspect FILE.h5`: what a kktrain file holds (checkpoint, export, grads dump): its
// kind, step and architecture, every dataset with dtype, shape and attributes, and the config a
// checkpoint was saved with. Read-only; any HDF5 file works.
#include <cstdio>
#include <string>

#include "apps/cli/commands.hpp"
#include "core/param_registry.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/model_weights.hpp"

namespace kktrain {

namespace {

std::string format_attr(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string attr_text(const h5::File& f, const std::string& obj, const std::string& name) {
  const std::string c = f.attr_class(obj, name);
  if (c == "string") return f.read_attr_str(obj, name);
  if (c == "integer") return std::to_string(f.read_attr_i64(obj, name));
  if (c == "float") return format_attr(f.read_attr_f64(obj, name));
  return "(" + c + ")";
}

std::string dtype_text(const h5::File& f, const std::string& ds) {
  try {
    return h5::elem_name(f.elem_of(ds));
  } catch (const Error&) {
  }
  // Not a kktrain element type: other floats by name, integers (a grads dump's batch) by size.
  h5::Handle d(H5Dopen2(f.id(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  h5::Handle t(H5Dget_type(d.id()), H5Tclose);
  if (H5Tget_class(t.id()) == H5T_INTEGER) {
    return std::string(H5Tget_sign(t.id()) == H5T_SGN_NONE ? "uint" : "int") +
           std::to_string(8 * H5Tget_size(t.id()));
  }
  return f.float_kind(ds);
}

int run_inspect(const ParsedArgs& args, AppContext& ctx) {
  if (ctx.mpi->rank() != 0) return 0;
  std::string path = args.positionals.at(0);
  check_model_path(path, "inspect");
  path = resolve_checkpoint(path, "inspect");
  const h5::File f = h5::File::open_read(path);
  std::printf("file: %s\n", path.c_str());
  std::string config;
  for (const auto& a : f.attr_names("/")) {
    if (a == "config") {
      config = f.read_attr_str("/", a);
      continue;
    }
    std::printf("  %s: %s\n", a.c_str(), attr_text(f, "/", a).c_str());
  }
  std::printf("%-64s %-9s %-16s %s\n", "dataset", "dtype", "shape", "attributes");
  for (const auto& ds : f.datasets()) {
    std::string attrs;
    for (const auto& a : f.attr_names(ds)) {
      if (a == "dtype") continue;
      attrs += (attrs.empty() ? "" : " ") + a + "=" + attr_text(f, ds, a);
    }
    std::printf("%-64s %-9s %-16s %s\n", ds.c_str(), dtype_text(f, ds).c_str(),
                shape_string(f.shape(ds)).c_str(), attrs.c_str());
  }
  if (!config.empty()) std::printf("config:\n%s", config.c_str());
  return 0;
}

}  // namespace

Command inspect_command() {
  CommandSpec s;
  s.name = "inspect";
  s.synopsis = "inspect FILE.h5";
  s.summary = "List a kktrain file's datasets, dtypes, shapes, step and config.";
  s.details =
      "FILE.h5 is a checkpoint (or its step directory or checkpoint root), an export or a\n"
      "grads dump; any HDF5 file is listed. Prints the root attributes (format, step,\n"
      "architecture, ...), one line per dataset (dtype, shape, attributes such as checksum,\n"
      "trainable, alias) and, for checkpoints, the resolved config they were saved with.\n";
  s.positionals = {"FILE.h5"};
  s.takes_overrides = false;
  return Command{s, run_inspect, false};
}

}  // namespace kktrain
