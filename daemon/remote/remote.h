/* SPDX-License-Identifier: MIT */
/*
 * remote.h - kvarenad beyond one machine: the two programs of the remote
 * room, run by main.c as modes of the kvarenad executable.
 *
 *   kvarenad --remote-link ...   started by the orchestrator in a remote
 *                                worker slot (link.c); never by hand
 *   kvarenad --worker-of HOST:PORT ...   a remote worker host (rworker.c),
 *                                its own kvarena arena and stage worker,
 *                                joining the orchestrator at HOST:PORT
 *
 * Documentation/remote.md is the operator's page; kvarenad(8) lists the
 * options. Both return the process's exit status.
 */
#ifndef KVR_REMOTE_H
#define KVR_REMOTE_H

int kvr_link_main(int argc, char **argv);
int kvr_rworker_main(int argc, char **argv);

#endif
