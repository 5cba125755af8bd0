/* bench_transport --tags: the frame tag constructions (bench_tags.c). */
#ifndef ESD_BENCH_TAGS_H
#define ESD_BENCH_TAGS_H

/* Print one row per construction, bytes tagged per second of CPU time by
 * frame size; reps runs each, interleaved, medians. 0 or -errno. */
int bench_tags(int reps);

#endif
