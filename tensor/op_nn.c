/* placeholder: written by helper B2 */
typedef int em__placeholder_op_nn;
