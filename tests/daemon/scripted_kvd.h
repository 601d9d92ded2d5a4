/* SPDX-License-Identifier: MIT */
/*
 * scripted_kvd.h - construction of the scripted test orchestrator
 * (scripted_kvd.c implements kvd.h).
 */
#ifndef SCRIPTED_KVD_H
#define SCRIPTED_KVD_H

#include <stdint.h>

struct kvd;

/* context: longest prompt in bytes (its "tokens") */
struct kvd *scripted_kvd_new(const char *model, uint32_t context);
void scripted_kvd_free(struct kvd *d);
void scripted_kvd_set_ready(struct kvd *d, int ready);
/* Declare one server-side tool, srv_echo, to every tenant (see "srv"). */
void scripted_kvd_set_server_tools(struct kvd *d, int on);
/* Render as model family FAMILY (daemon/chat: "chatml", "qwen3", ...)
 * before the API starts; 0, or -EINVAL. */
int scripted_kvd_set_family(struct kvd *d, const char *family);

#endif
