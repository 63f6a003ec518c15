#ifndef CALC_OPS_H
#define CALC_OPS_H

double op_add(double a, double b);
double op_mul(double a, double b);
double op_hyp(double a, double b);

#endif
