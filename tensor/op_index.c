/* placeholder: written by helper B1 */
typedef int em__placeholder_op_index;
