/* SPDX-License-Identifier: MIT */
/*
 * error.h - an OpenAI-shaped error: HTTP status + the body
 *   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
 * filled by request validation and by the server for kvd errors.
 */
#ifndef KVD_API_ERROR_H
#define KVD_API_ERROR_H

#include <stddef.h>

#include <jansson.h>

#include "kvd.h"

struct api_error {
	int status;		/* HTTP status */
	const char *type;	/* OpenAI error type (static string) */
	const char *code;	/* OpenAI error code (static) or NULL */
	char param[128];	/* "" means null */
	char message[512];
	unsigned retry_after_s;	/* 429: Retry-After */
};

#define API_INVALID "invalid_request_error"

void api_error_set(struct api_error *e, int status, const char *type,
		   const char *code, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* 400 invalid_request_error naming param (may be NULL). */
#define api_bad(e, param, ...) \
	api_error_set((e), 400, API_INVALID, NULL, (param), __VA_ARGS__)
/* From the orchestrator's error. */
void api_error_from_kvd(struct api_error *e, const struct kvd_error *k);
/* A JSON string of s[0..n) with bytes that are not UTF-8 as U+FFFD (JSON
 * must be UTF-8; request paths, generated text need not be). */
json_t *api_json_string_lossy(const char *s, size_t n);
/* The JSON body (malloc'd, NUL-terminated); NULL on allocation failure. */
char *api_error_json(const struct api_error *e);

#endif
