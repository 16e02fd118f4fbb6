/* placeholder: written by helper D; exits 77 (skipped) until then */
int main(void) { return 77; }
