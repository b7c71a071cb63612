/*
 * What confine.c and engine.c (the two seccomp filters) share; not part
 * of the sandbox layer's interface.
 */
#ifndef SLUICE_CONFINE_INT_H
#define SLUICE_CONFINE_INT_H

#include <stdint.h>

#include <seccomp.h>

/*
 * An argument comparison with both data set (the SCMP_A* macros leave
 * datum_b to C's implicit zero, which clang's
 * -Wmissing-field-initializers refuses).
 */
struct scmp_arg_cmp
sandbox_scmp_cmp(unsigned arg, enum scmp_compare op, uint64_t a, uint64_t b);

#endif
