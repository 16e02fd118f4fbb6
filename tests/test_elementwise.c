/* placeholder: written by helper A; exits 77 (skipped) until then */
int main(void) { return 77; }
