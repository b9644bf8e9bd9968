/* The op vocabulary's one host-callable formula: si_act_apply, exported for tests and callers
 * that have no kernel of their own. */
#include "ops.h"

#include "kernel_math.h"

/* The activation formulas are kernel_math.h's si_act_eval (shared with the GPU), inline so the
 * conv epilogue and elementwise loops pay no call per element; this exports the same body. */
float si_act_apply(float v, si_act a) {
    return si_act_eval(v, a);
}
