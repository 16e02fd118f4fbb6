/* placeholder: written by helper H */
typedef int em__placeholder_dot;
