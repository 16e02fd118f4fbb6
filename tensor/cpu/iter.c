/* placeholder: written by helper A */
typedef int em__placeholder_iter;
