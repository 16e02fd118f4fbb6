/* placeholder: written by helper E; exits 77 (skipped) until then */
int main(void) { return 77; }
