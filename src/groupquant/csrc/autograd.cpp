// Autograd of the fake-quant op, in C++ (one registration for CPU and CUDA, Autograd key).
//
// Straight-through estimators: group_fake_quant passes the gradient unchanged, or, with its
// want_mask flag, multiplies it by the bool mask it returned (zero where the element saturated:
// the clipped STE); the mask and the scales (want_scale) carry no gradient. Nothing but the mask
// (1 byte per element, when asked for) is saved. Being C++, a call costs no Python on the way in,
// which matters for small layers. group_quantize (codes) is not differentiable and has no
// autograd kernel.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace groupquant {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptTensor = std::optional<at::Tensor>;
using FakeQuantOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The op below the autograd key (the CPU / CUDA kernel, or the fake kernel under torch.compile).
FakeQuantOutputs call_kernel(const at::Tensor& x, at::IntArrayRef params, bool want_mask, bool want_scale,
                             const OptTensor& ts) {
  at::AutoDispatchBelowADInplaceOrView guard;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("groupquant::group_fake_quant", "")
                       .typed<FakeQuantOutputs(const at::Tensor&, at::IntArrayRef, bool, bool, const OptTensor&)>();
  return op.call(x, params, want_mask, want_scale, ts);
}

class FakeQuantFn : public torch::autograd::Function<FakeQuantFn> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> params,
                               bool want_mask, bool want_scale, OptTensor ts) {
    auto [out, mask, scale] = call_kernel(x, params, want_mask, want_scale, ts);
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
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// No gradient wanted (inference, no_grad, a tensor without requires_grad): straight to the kernel,
// without building an autograd node.
FakeQuantOutputs fake_quant_autograd(const at::Tensor& x, at::IntArrayRef params, bool want_mask, bool want_scale,
                                     const OptTensor& ts) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return call_kernel(x, params, want_mask, want_scale, ts);
  auto outs = FakeQuantFn::apply(x, params.vec(), want_mask, want_scale, ts);
  return {outs[0], outs[1], outs[2]};
}

}  // namespace
}  // namespace groupquant

TORCH_LIBRARY_IMPL(groupquant, Autograd, m) { m.impl("group_fake_quant", &groupquant::fake_quant_autograd); }
