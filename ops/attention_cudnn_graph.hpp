// The cuDNN backend graph API in C, as ops/attention_cudnn.cpp builds its graphs with it: owned
// descriptors, attribute setters that throw naming the attribute, and Graph, which builds one
// operation graph of tensors and matmul / pointwise / reduction / reshape operations. Private to
// ops/attention_cudnn.cpp (CUDA builds with cuDNN only).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.hpp"

namespace kktrain {
namespace cudnn_attention {

// Virtual tensors take unique ids from here on; the caller's own tensors use ids below it.
constexpr int64_t kFirstVirtualUid = 100;

inline void check(cudnnStatus_t status, const std::string& call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw RuntimeFailure("cuDNN attention: " + call + " failed: " + cudnnGetErrorString(status));
}

// ---------------------------------------------------------------------------------------------
// Descriptors: owned, destroyed with the plan that keeps them.
// ---------------------------------------------------------------------------------------------
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() { cudnnBackendDestroyDescriptor(d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

inline void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(d, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    check(status, "cudnnBackendSetAttribute(attribute " + std::to_string(name) + ")");
}
inline void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendDescriptor_t value) {
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
// what: the descriptor, for the message.
inline void finalize(cudnnBackendDescriptor_t d, const char* what) {
  check(cudnnBackendFinalize(d), std::string("cudnnBackendFinalize(") + what + ")");
}

enum class Kind { device, virtual_, by_value };

struct Dims4 {
  std::array<int64_t, 4> dims, strides;
};
inline Dims4 contiguous(int64_t a, int64_t b, int64_t c, int64_t d) {
  return {{a, b, c, d}, {b * c * d, c * d, d, 1}};
}
inline Dims4 scalar() {
  return {{1, 1, 1, 1}, {1, 1, 1, 1}};
}

// Builds one operation graph; keeps every descriptor it creates alive (the plan owns the builder).
class Graph {
 public:
  cudnnBackendDescriptor_t tensor(cudnnDataType_t type, const Dims4& shape, Kind kind,
                                  int64_t uid = 0) {
    auto& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t id = uid != 0 ? uid : next_virtual_++;
    const int64_t alignment = 16;  // bytes; cudnn-frontend's default for every tensor
    const bool is_virtual = kind == Kind::virtual_, by_value = kind == Kind::by_value;
    set(t.get(), CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t.get(), CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, shape.dims.data());
    set(t.get(), CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, shape.strides.data());
    set(t.get(), CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    set(t.get(), CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t.get(), CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t.get(), CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t.get(), "tensor");
    return t.get();
  }
  // y = mode(x, b) (b may be null), or y = t ? x : b for binary_select; axis for gen_index.
  void pointwise(cudnnBackendDescriptor_t y, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b = nullptr,
                 cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1) {
    auto& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(pw.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw.get(), "pointwise");
    auto& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    add_op(op);
  }
  // c = a @ b over the last two dims, batched over the first two (b's heads broadcast over a's).
  void matmul(cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b) {
    auto& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(mm.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(mm.get(), "matmul");
    auto& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
    add_op(op);
  }
  // y = reduce(x) over the dims where y has extent 1.
  void reduction(cudnnBackendDescriptor_t y, cudnnReduceTensorOp_t mode,
                 cudnnBackendDescriptor_t x) {
    auto& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(rd.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(rd.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    finalize(rd.get(), "reduction");
    auto& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd.get());
    add_op(op);
  }
  // y = x seen with y's dims and strides (a transpose of the last two dims here).
  void reshape(cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
    auto& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(op.get(), CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(op);
  }
  cudnnBackendDescriptor_t finish(cudnnHandle_t handle) {
    auto& g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data());
    set(g.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(g.get(), "operation graph");
    return g.get();
  }
  Desc& make(cudnnBackendDescriptorType_t type) {
    owned_.push_back(std::make_unique<Desc>(type));
    return *owned_.back();
  }

 private:
  void add_op(Desc& op) {
    finalize(op.get(), "operation");
    ops_.push_back(op.get());
  }
  std::vector<std::unique_ptr<Desc>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtualUid;
};

}  // namespace cudnn_attention
}  // namespace kktrain
