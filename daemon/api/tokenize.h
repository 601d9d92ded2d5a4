/* SPDX-License-Identifier: MIT */
/*
 * tokenize.h - POST /tokenize and /detokenize (llama.cpp's server's
 * shapes): a request body in, a response body out (malloc'd JSON), or
 * NULL with e filled (400 naming the field, 500 out of memory).
 */
#ifndef KVD_API_TOKENIZE_H
#define KVD_API_TOKENIZE_H

#include <stddef.h>

#include "error.h"
#include "kvd.h"

char *api_tokenize(struct kvd *d, const char *body, size_t len, struct api_error *e);
char *api_detokenize(struct kvd *d, const char *body, size_t len, struct api_error *e);

#endif
