/* placeholder: written by helper D */
typedef int em__placeholder_rng;
