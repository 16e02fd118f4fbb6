/* placeholder: written by helper B1 */
typedef int em__placeholder_k_index;
