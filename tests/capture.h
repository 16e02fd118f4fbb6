/* ember tests — capturing what the library writes to stderr (its one-time
 * warnings), for the Check suites and the plain MPI tests alike. */
#ifndef EMBER_TEST_CAPTURE_H
#define EMBER_TEST_CAPTURE_H

/* Everything written to fd 2 between tu_capture_stderr_begin and
 * tu_capture_stderr_end comes back as a malloc'd string the caller frees;
 * one capture at a time. begin returns 0, or -1 (nothing redirected); end
 * returns NULL when begin failed or the read-back did. */
int tu_capture_stderr_begin(void);
char *tu_capture_stderr_end(void);
/* The non-overlapping occurrences of needle in hay (0 for a NULL hay). */
int tu_count_of(const char *hay, const char *needle);

#endif
