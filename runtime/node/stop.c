/*
 * The graceful stop of the job (struct node_stop) and the abandon of a
 * second signal: asked by the signal thread (main.c), esdctl (ctl.c) and
 * the trainers (trainer_srv.c), carried out by the iterations (iter.c).
 */
#include "node.h"

#include <esd/log.h>

volatile sig_atomic_t esd_node_signal;

void node_ask_stop(struct node *nd, const char *why)
{
	pthread_mutex_lock(&nd->qmu);
	bool first = !nd->stop.asked;
	nd->stop.asked = true;
	pthread_mutex_unlock(&nd->qmu);
	if (first)
		ESD_INFO("node", "%s: the job stops gracefully at the next checkpoint boundary "
			 "(a second signal abandons it at once)", why);
}

uint64_t node_last_iter(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	uint64_t end = nd->stop.at && nd->stop.at < nd->job.iterations ? nd->stop.at
									: nd->job.iterations;
	pthread_mutex_unlock(&nd->qmu);
	return end;
}
