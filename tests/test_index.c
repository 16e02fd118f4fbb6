/* placeholder: written by helper B1; exits 77 (skipped) until then */
int main(void) { return 77; }
