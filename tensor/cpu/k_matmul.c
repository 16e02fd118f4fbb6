/* placeholder: written by helper C */
typedef int em__placeholder_k_matmul;
