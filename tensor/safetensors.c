/* placeholder: written by helper E */
typedef int em__placeholder_safetensors;
