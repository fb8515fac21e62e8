#include "backend/call_scope.h"

namespace blockcsi {
namespace {
thread_local const CallScope* current_scope = nullptr;
}  // namespace

const CallScope* CurrentCallScope() { return current_scope; }

ScopedCall::ScopedCall(CallScope scope) : scope_(std::move(scope)), previous_(current_scope) {
  current_scope = &scope_;
}

ScopedCall::~ScopedCall() { current_scope = previous_; }

}  // namespace blockcsi
