/* SPDX-License-Identifier: MIT */
/*
 * log.h - kvarenad's log lines: one line per event on stderr (journald
 * under systemd), "LEVEL component: message". Thread-safe.
 */
#ifndef KVD_LOG_H
#define KVD_LOG_H

enum kvd_log_level { KVD_LOG_ERR = 0, KVD_LOG_WARN, KVD_LOG_INFO, KVD_LOG_DEBUG };

/* Lines above this level are dropped (default KVD_LOG_INFO). */
void kvd_log_set_level(enum kvd_log_level level);
void kvd_log(enum kvd_log_level level, const char *component,
	     const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
