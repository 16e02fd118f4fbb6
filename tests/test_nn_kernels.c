/* placeholder: written by helper B2; exits 77 (skipped) until then */
int main(void) { return 77; }
