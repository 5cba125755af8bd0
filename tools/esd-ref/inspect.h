/* esd-ref subcommands on checkpoint files (inspect.c). Each takes the
 * arguments after "esd-ref" (argv[0] is the subcommand name) and returns
 * the process exit status. */
#ifndef ESD_REF_INSPECT_H
#define ESD_REF_INSPECT_H

/* esd-ref info FILE...: validate, print the header. 0, or 3 if any file
 * is refused (the reason on stderr). */
int esd_ref_cmd_info(int argc, char **argv);

/* esd-ref compare [opts] A[,A...] B[,B...]: 0 equal, 1 different, 2 usage,
 * 3 a file refused. */
int esd_ref_cmd_compare(int argc, char **argv);

#endif
