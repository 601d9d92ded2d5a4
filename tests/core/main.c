// SPDX-License-Identifier: GPL-2.0
/*
 * CUnit runner for the shared-core host tests: registers every suite, runs
 * them verbosely, and exits nonzero on any failed assertion or test.
 * Environment: KVC_TEST_SEED and KVC_TEST_OPS steer the randomized suite.
 */
#include <stdio.h>
#include <stdlib.h>
#include <CUnit/Basic.h>

#include "kvc_test.h"

int main(void)
{
	int (*const suites[])(void) = {
		kvc_test_register_pool,
		kvc_test_register_session,
		kvc_test_register_blocks,
		kvc_test_register_policy,
		kvc_test_register_args,
		kvc_test_register_random,
	};
	unsigned int failures, tests_failed;
	size_t i;

	if (CU_initialize_registry() != CUE_SUCCESS) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		return 2;
	}
	for (i = 0; i < sizeof(suites) / sizeof(suites[0]); i++) {
		if (suites[i]() != CUE_SUCCESS) {
			fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
			CU_cleanup_registry();
			return 2;
		}
	}
	CU_basic_set_mode(CU_BRM_VERBOSE);
	if (CU_basic_run_tests() != CUE_SUCCESS) {
		fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
		CU_cleanup_registry();
		return 2;
	}
	failures = CU_get_number_of_failures();
	tests_failed = CU_get_number_of_tests_failed();
	CU_cleanup_registry();
	printf("\ncheck-core: %u failed assertion(s), %u failed test(s)\n",
	       failures, tests_failed);
	return failures || tests_failed ? 1 : 0;
}
