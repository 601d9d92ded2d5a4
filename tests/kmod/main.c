// SPDX-License-Identifier: GPL-2.0
/*
 * kvarena in-guest suite runner.  Usage: test_kmod [suite[/test]...]
 * Suites: uapi blocks dmabuf lifetime trace uring events netlink kvactl
 * security review35 stress module (default: all, in that order; "module"
 * reloads kvarena.ko, so it runs last).  suite/test runs that one test of
 * the suite (the rest of it shows as inactive).
 */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

static const struct {
	const char *name;
	void (*add)(void);
} suites[] = {
	{ "uapi", kt_register_uapi },
	{ "blocks", kt_register_blocks },
	{ "dmabuf", kt_register_dmabuf },
	{ "lifetime", kt_register_lifetime },
	{ "trace", kt_register_trace },
	{ "uring", kt_register_uring },
	{ "events", kt_register_events },
	{ "netlink", kt_register_netlink },
	{ "kvactl", kt_register_kvactl },
	{ "security", kt_register_security },
	{ "review35", kt_register_review35 },
	{ "stress", kt_register_stress },
	{ "module", kt_register_module },
};

/* arg names suite whole ("uring") or one of its tests ("uring/test_x"). */
static const char *arg_test(const char *arg, const char *suite)
{
	size_t n = strlen(suite);

	if (strncmp(arg, suite, n))
		return NULL;
	return arg[n] == '/' ? arg + n + 1 : arg[n] ? NULL : "";
}

/* Leave active only the tests of s that an argument names, if any does. */
static void pick_tests(CU_pSuite s, int argc, char **argv)
{
	CU_pTest t;
	const char *name;
	int j, named = 0, whole = 0;

	for (j = 1; j < argc; j++) {
		name = arg_test(argv[j], s->pName);
		named |= name && *name;
		whole |= name && !*name;
	}
	if (!named || whole)
		return;
	for (t = s->pTest; t; t = t->pNext) {
		int want = 0;

		for (j = 1; j < argc; j++) {
			name = arg_test(argv[j], s->pName);
			want |= name && !strcmp(name, t->pName);
		}
		CU_set_test_active(t, want ? CU_TRUE : CU_FALSE);
	}
}

int main(int argc, char **argv)
{
	unsigned int failures;
	CU_pSuite s;
	size_t i;
	int j;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 2;
	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
		int want = argc < 2;

		for (j = 1; j < argc; j++)
			want |= arg_test(argv[j], suites[i].name) != NULL;
		if (want)
			suites[i].add();
	}
	for (s = CU_get_registry()->pSuite; s; s = s->pNext)
		pick_tests(s, argc, argv);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	failures = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
	if (CU_get_number_of_suites_failed())
		failures++;
	CU_cleanup_registry();
	return failures ? 1 : 0;
}
