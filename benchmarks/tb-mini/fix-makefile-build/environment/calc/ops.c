#include <math.h>

#include "ops.h"

double op_add(double a, double b) { return a + b; }

double op_mul(double a, double b) { return a * b; }

/* Length of the hypotenuse, without overflow for large sides. */
double op_hyp(double a, double b) { return hypot(a, b); }
