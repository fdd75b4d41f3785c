// Autograd of the fake-quant ops, in C++ (one registration for CPU and CUDA, Autograd key).
//
// Straight-through estimators: group_fake_quant passes the gradient unchanged;
// group_fake_quant_masked multiplies it by the bool mask it returned (zero where the element
// saturated: the clipped STE); group_fake_quant_scale does either, by its want_mask flag, and its
// scales (and mask) carry no gradient. Nothing but the mask (1 byte per element, when asked for)
// is saved. Being C++, a call costs no Python on the way in, which matters for small layers.
// group_quantize (codes) is not differentiable and has no autograd kernel.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace groupquant {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;

// The op below the autograd key (the CPU / CUDA kernel, or the fake kernel under torch.compile).
template <typename Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

class FakeQuantFn : public torch::autograd::Function<FakeQuantFn> {
 public:
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, std::vector<int64_t> params, OptTensor ts) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op =
        op_handle<at::Tensor(const at::Tensor&, at::IntArrayRef, const OptTensor&)>("groupquant::group_fake_quant");
    return op.call(x, params, ts);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

class FakeQuantMaskedFn : public torch::autograd::Function<FakeQuantMaskedFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> params,
                               OptTensor ts) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = op_handle<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, at::IntArrayRef, const OptTensor&)>(
        "groupquant::group_fake_quant_masked");
    auto [out, mask] = op.call(x, params, ts);
    ctx->mark_non_differentiable({mask});
    ctx->save_for_backward({mask});
    return {out, mask};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor mask = ctx->get_saved_variables()[0];
    return {grads[0] * mask.to(grads[0].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

class FakeQuantScaleFn : public torch::autograd::Function<FakeQuantScaleFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> params,
                               bool want_mask, OptTensor ts) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = op_handle<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, at::IntArrayRef, bool, const OptTensor&)>("groupquant::group_fake_quant_scale");
    auto [out, mask, scale] = op.call(x, params, want_mask, ts);
    ctx->mark_non_differentiable({mask, scale});
    ctx->saved_data["masked"] = want_mask;
    if (want_mask) ctx->save_for_backward({mask});
    return {out, mask, scale};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor grad = grads[0];
    if (ctx->saved_data["masked"].toBool()) {
      const at::Tensor mask = ctx->get_saved_variables()[0];
      grad = grad * mask.to(grad.scalar_type());
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// No gradient wanted (inference, no_grad, a tensor without requires_grad): straight to the kernel,
// without building an autograd node.
bool no_graph(const at::Tensor& x) { return !at::GradMode::is_enabled() || !x.requires_grad(); }

at::Tensor fake_quant_autograd(const at::Tensor& x, at::IntArrayRef params, const OptTensor& ts) {
  if (no_graph(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op =
        op_handle<at::Tensor(const at::Tensor&, at::IntArrayRef, const OptTensor&)>("groupquant::group_fake_quant");
    return op.call(x, params, ts);
  }
  return FakeQuantFn::apply(x, params.vec(), ts);
}

std::tuple<at::Tensor, at::Tensor> fake_quant_masked_autograd(const at::Tensor& x, at::IntArrayRef params,
                                                              const OptTensor& ts) {
  if (no_graph(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = op_handle<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, at::IntArrayRef, const OptTensor&)>(
        "groupquant::group_fake_quant_masked");
    return op.call(x, params, ts);
  }
  auto outs = FakeQuantMaskedFn::apply(x, params.vec(), ts);
  return {outs[0], outs[1]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fake_quant_scale_autograd(const at::Tensor& x, at::IntArrayRef params,
                                                                         bool want_mask, const OptTensor& ts) {
  if (no_graph(x)) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = op_handle<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, at::IntArrayRef, bool, const OptTensor&)>("groupquant::group_fake_quant_scale");
    return op.call(x, params, want_mask, ts);
  }
  auto outs = FakeQuantScaleFn::apply(x, params.vec(), want_mask, ts);
  return {outs[0], outs[1], outs[2]};
}

}  // namespace
}  // namespace groupquant

TORCH_LIBRARY_IMPL(groupquant, Autograd, m) {
  m.impl("group_fake_quant", &groupquant::fake_quant_autograd);
  m.impl("group_fake_quant_masked", &groupquant::fake_quant_masked_autograd);
  m.impl("group_fake_quant_scale", &groupquant::fake_quant_scale_autograd);
}
