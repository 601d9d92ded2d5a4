// SPDX-License-Identifier: MIT
/*
 * test_api.c - unit tests of kvarenad's HTTP layer pieces without a
 * server: request validation (valid bodies and every class of invalid
 * one), the chat template (exact text, and byte stability across turns),
 * tool-call parsing (batch, and streaming split at every byte), response
 * JSON, API key lookup. CUnit, built with ASan/UBSan.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>
#include <jansson.h>

#include "auth.h"
#include "chat.h"
#include "chat_request.h"
#include "error.h"
#include "response.h"

#define MODEL "test-model"
static struct chat_template *tmpl;	/* ChatML, as the test models' */

/*
 * Linked with -Wl,--wrap=calloc (api.mk): the API layer's and the chat
 * library's callocs come here, so a test can fail the k-th one (jansson
 * and libc allocate on their own). Off (-1) but while a test sets it.
 */
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
static long fail_at = -1, callocs;

void *__wrap_calloc(size_t n, size_t size)
{
	if (fail_at >= 0 && callocs++ == fail_at)
		return NULL;
	return __real_calloc(n, size);
}

/* jansson's allocator (json_set_alloc_funcs, set in main): libc's,
 * failing the k-th allocation while a test sets json_fail_at */
static long json_fail_at = -1, json_allocs;

static void *json_malloc_failing(size_t n)
{
	if (json_fail_at >= 0 && json_allocs++ == json_fail_at)
		return NULL;
	return malloc(n);
}

/* ---------------------------------------------------------------- requests */

static int parse(const char *body, struct chat_request *r, struct api_error *e)
{
	return chat_request_parse(body, strlen(body), MODEL, r, e);
}

static void test_request_valid(void)
{
	struct chat_request r;
	struct api_error e;
	const char *body =
		"{\"model\": \"test-model\", \"messages\": ["
		"{\"role\": \"system\", \"content\": \"Be brief.\"},"
		"{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
		"{\"role\": \"user\", \"content\": \"weather?\", \"name\": \"bob\"},"
		"{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}], \"refusal\": null, \"annotations\": []},"
		"{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"sunny\"}],"
		"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", \"parameters\": {\"type\": \"object\"}, \"strict\": false}}],"
		"\"tool_choice\": \"auto\", \"parallel_tool_calls\": false, \"stream\": true,"
		"\"stream_options\": {\"include_usage\": true}, \"max_completion_tokens\": 77,"
		"\"temperature\": 0.5, \"top_p\": 0.9, \"seed\": -3, \"stop\": [\"END\", \"STOP\"],"
		"\"logprobs\": true, \"top_logprobs\": 5, \"n\": 1, \"user\": \"u1\","
		"\"prompt_cache_key\": \"conv-9\", \"response_format\": {\"type\": \"text\"},"
		"\"frequency_penalty\": 0, \"presence_penalty\": 0.5, \"metadata\": {\"a\": \"b\"},"
		"\"store\": false, \"service_tier\": \"auto\", \"reasoning_effort\": \"none\", \"verbosity\": \"medium\","
		"\"prompt_cache_retention\": \"in_memory\", \"safety_identifier\": \"u-1\", \"logit_bias\": {\"7\": -100, \"12\": 2.5}, \"modalities\": [\"text\"],"
		"\"top_k\": 40, \"min_p\": 0.05, \"repeat_penalty\": 1.1, \"ignore_eos\": true,"
		"\"kvarena\": {\"close_in_budget\": true}}";

	CU_ASSERT_EQUAL_FATAL(parse(body, &r, &e), 0);
	CU_ASSERT_EQUAL(r.n_msgs, 5);
	CU_ASSERT_EQUAL(r.msgs[0].role, CHAT_SYSTEM);
	CU_ASSERT_EQUAL(r.msgs[1].role, CHAT_SYSTEM);
	CU_ASSERT_STRING_EQUAL(r.msgs[1].content, "ab");
	CU_ASSERT_EQUAL(r.msgs[3].role, CHAT_ASSISTANT);
	CU_ASSERT_EQUAL(r.msgs[3].content_len, 0);
	CU_ASSERT_EQUAL(r.msgs[3].n_calls, 1);
	CU_ASSERT_STRING_EQUAL(r.msgs[3].calls[0].arguments, "{\"city\":\"Paris\"}");
	CU_ASSERT_STRING_EQUAL(r.msgs[4].tool_call_id, "call_1");
	CU_ASSERT_EQUAL(r.n_tools, 1);
	CU_ASSERT_STRING_EQUAL(r.tools[0].name, "get_weather");
	CU_ASSERT_EQUAL(r.parallel_tool_calls, 0);
	CU_ASSERT(r.stream && r.include_usage);
	CU_ASSERT_EQUAL(r.s.max_tokens, 77);
	CU_ASSERT(r.s.temperature == 0.5f && r.s.top_p == 0.9f);
	CU_ASSERT(r.s.has_seed && r.s.seed == (uint64_t)-3);
	CU_ASSERT_EQUAL(r.s.n_stop, 2);
	CU_ASSERT_STRING_EQUAL(r.s.stop[1], "STOP");
	CU_ASSERT(r.s.logprobs && r.s.top_logprobs == 5);
	CU_ASSERT_STRING_EQUAL(r.user, "u1");
	CU_ASSERT_STRING_EQUAL(r.prompt_cache_key, "conv-9");
	CU_ASSERT(r.s.frequency_penalty == 0 && r.s.presence_penalty == 0.5f);
	CU_ASSERT(r.s.top_k == 40 && r.s.min_p == 0.05f && r.s.repetition_penalty == 1.1f);
	CU_ASSERT(r.s.ignore_eos && r.s.close_in_budget);
	CU_ASSERT_EQUAL_FATAL(r.s.n_logit_bias, 2);
	CU_ASSERT(r.s.logit_bias[0].token == 7 && r.s.logit_bias[0].bias == -100);
	CU_ASSERT(r.s.logit_bias[1].token == 12 && r.s.logit_bias[1].bias == 2.5f);
	chat_request_free(&r);

	/* the smallest request, and defaults */
	CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"x\",\"max_tokens\":5}",
				    &r, &e), 0);
	CU_ASSERT(r.s.temperature == 1.0f && r.s.top_p == 1.0f && !r.s.has_seed);
	CU_ASSERT(!r.s.top_k && r.s.min_p == 0 && r.s.repetition_penalty == 1.0f &&
		  !r.s.n_logit_bias && !r.s.ignore_eos && !r.s.close_in_budget);
	CU_ASSERT(r.parallel_tool_calls && !r.stream && r.tool_choice == CHAT_TOOLS_AUTO);
	CU_ASSERT_EQUAL(r.s.n_stop, 1);
	CU_ASSERT_EQUAL(r.s.max_tokens, 5);
	CU_ASSERT_PTR_NULL(r.user);
	CU_ASSERT_EQUAL(r.thinking, CHAT_THINK_DEFAULT);
	chat_request_free(&r);

	/* numbers at both ends of their ranges are taken (temperature 0 is
	 * greedy decoding), and null booleans are absent */
	CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				    "\"temperature\":0,\"top_p\":1,\"frequency_penalty\":-2,\"presence_penalty\":2,"
				    "\"stream\":null,\"parallel_tool_calls\":null,\"repetition_penalty\":null}", &r, &e), 0);
	CU_ASSERT(r.s.temperature == 0 && r.s.top_p == 1 && r.s.frequency_penalty == -2 &&
		  r.s.presence_penalty == 2 && !r.stream && r.parallel_tool_calls &&
		  r.s.repetition_penalty == 1.0f);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				    "\"temperature\":2,\"top_p\":0,\"frequency_penalty\":2,\"presence_penalty\":-2}",
				    &r, &e), 0);
	CU_ASSERT(r.s.temperature == 2 && r.s.top_p == 0 && r.s.frequency_penalty == 2 &&
		  r.s.presence_penalty == -2);
	chat_request_free(&r);

	/* no max_tokens: up to the context (0); no top_logprobs: 0 */
	CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
				    &r, &e), 0);
	CU_ASSERT(r.s.max_tokens == 0 && r.s.top_logprobs == 0 && !r.s.logprobs && r.n == 1);
	chat_request_free(&r);

	/* null is absent: stream_options without streaming */
	CU_ASSERT_EQUAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
			      "\"stream\":false,\"stream_options\":null}", &r, &e), 0);
	chat_request_free(&r);

	/* tool_choice naming a function: the first of two tools too */
	CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
				    "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
				    "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}",
				    &r, &e), 0);
	CU_ASSERT_EQUAL(r.tool_choice, CHAT_TOOLS_NAMED);
	CU_ASSERT(r.tool_choice_name && !strcmp(r.tool_choice_name, "f"));
	chat_request_free(&r);

	/* thinking: the template argument, reasoning_effort none and
	 * minimal (the argument wins), and reasoning sent back */
	{
		static const struct {
			const char *extra;
			enum chat_thinking want;
		} th[] = {
			{ ",\"chat_template_kwargs\":{\"enable_thinking\":false}", CHAT_THINK_OFF },
			{ ",\"chat_template_kwargs\":{\"enable_thinking\":true}", CHAT_THINK_ON },
			{ ",\"chat_template_kwargs\":{}", CHAT_THINK_DEFAULT },
			{ ",\"chat_template_kwargs\":null,\"reasoning_effort\":\"none\"", CHAT_THINK_OFF },
			{ ",\"reasoning_effort\":\"minimal\"", CHAT_THINK_OFF },
			{ ",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}", CHAT_THINK_ON },
		};
		char b[512];

		for (size_t i = 0; i < sizeof(th) / sizeof(th[0]); i++) {
			snprintf(b, sizeof(b), "{\"model\":\"test-model\",\"messages\":[{\"role\":"
				 "\"user\",\"content\":\"hi\"}]%s}", th[i].extra);
			CU_ASSERT_EQUAL_FATAL(parse(b, &r, &e), 0);
			CU_ASSERT_EQUAL(r.thinking, th[i].want);
			chat_request_free(&r);
		}
		/* the efforts above minimal: a think budget each, the
		 * family checked when served (gen.c) */
		static const struct {
			const char *name;
			enum chat_effort want;
			uint32_t budget;
		} ef[] = {
			{ "low", CHAT_EFFORT_LOW, 1024 }, { "medium", CHAT_EFFORT_MEDIUM, 4096 },
			{ "high", CHAT_EFFORT_HIGH, 16384 }, { "xhigh", CHAT_EFFORT_XHIGH, 0 },
		};

		for (size_t i = 0; i < sizeof(ef) / sizeof(ef[0]); i++) {
			snprintf(b, sizeof(b), "{\"model\":\"test-model\",\"messages\":[{\"role\":"
				 "\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"%s\"}", ef[i].name);
			CU_ASSERT_EQUAL_FATAL(parse(b, &r, &e), 0);
			CU_ASSERT_EQUAL(r.effort, ef[i].want);
			CU_ASSERT_EQUAL(r.thinking, CHAT_THINK_DEFAULT);
			CU_ASSERT_EQUAL(chat_effort_budget(r.effort), ef[i].budget);
			CU_ASSERT(r.effort_param && !strcmp(r.effort_param, "reasoning_effort"));
			chat_request_free(&r);
		}
		CU_ASSERT_EQUAL_FATAL(parse("{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
					    "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"R\\u00e9\"},"
					    "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning_content\":null}]}",
					    &r, &e), 0);
		CU_ASSERT(r.msgs[1].reasoning && r.msgs[1].reasoning_len == 3 &&
			  !memcmp(r.msgs[1].reasoning, "R\xc3\xa9", 3));
		CU_ASSERT_PTR_NULL(r.msgs[2].reasoning);
		CU_ASSERT_PTR_NULL(r.msgs[0].reasoning);
		chat_request_free(&r);
	}
}

struct bad {
	const char *body;
	int status;
	const char *param;	/* NULL: null */
	const char *code;	/* NULL: not checked */
};

#define M "\"model\":\"test-model\","
#define U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const struct bad bads[] = {
	/* not JSON / not an object */
	{ "", 400, NULL, NULL },
	{ "{", 400, NULL, NULL },
	{ "{\"model\": \"test-model\", \"messages\": [", 400, NULL, NULL },
	{ "nul", 400, NULL, NULL },
	{ "[1,2]", 400, NULL, NULL },
	{ "\"str\"", 400, NULL, NULL },
	{ "{" M U "} trailing", 400, NULL, NULL },
	{ "{" M U ",\"model\":\"test-model\"}", 400, NULL, NULL },	/* duplicate key */
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 400, NULL, NULL },
	/* invalid UTF-8 */
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, NULL, NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", 400, NULL, NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"\xed\xa0\x80\"}]}", 400, NULL, NULL },
	/* unknown top-level fields */
	{ "{" M U ",\"max_token\":5}", 400, "max_token", "unknown_parameter" },
	{ "{" M U ",\"foo\":null}", 400, "foo", "unknown_parameter" },
	/* model */
	{ "{" U "}", 400, "model", NULL },
	{ "{\"model\":5," U "}", 400, "model", NULL },
	{ "{\"model\":\"gpt-4o\"," U "}", 404, "model", "model_not_found" },
	/* messages */
	{ "{" M "\"messages\":[]}", 400, "messages", NULL },
	{ "{" M "\"messages\":{}}", 400, "messages", NULL },
	{ "{\"model\":\"test-model\"}", 400, "messages", NULL },
	{ "{" M "\"messages\":[5]}", 400, "messages[0]", NULL },
	{ "{" M "\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", NULL },
	{ "{" M "\"messages\":[{\"role\":7,\"content\":\"x\"}]}", 400, "messages[0].role", NULL },
	{ "{" M "\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role", NULL },
	{ "{" M "\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", 400, "messages[0].role", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", 400, "messages[0].content[0].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400, "messages[0].content[0].text", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[7]}]}", 400, "messages[0].content[0]", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", 400, "messages[0].content[0].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":5}]}", 400, "messages[0].name", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", 400, "messages[0].tool_calls", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":5,\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"bad name\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].function.name", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}", 400, "messages[0].tool_calls[0].function.arguments", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"custom\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"tool\",\"content\":\"r\"}]}", 400, "messages[0].tool_call_id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}]}", 400, "messages[0].tool_call_id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
	  "{\"role\":\"tool\",\"tool_call_id\":\"d\",\"content\":\"r\"}]}", 400, "messages[1].tool_call_id", NULL },
	/* tools and tool_choice */
	{ "{" M U ",\"tools\":{}}", 400, "tools", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"code_interpreter\"}]}", 400, "tools[0].type", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0].function", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", 400, "tools[0].function.name", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}", 400, "tools[0].function.parameters", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}", 400, "tools[0].function.name", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"yes\"}}]}", 400, "tools[0].function.strict", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":5}}]}", 400, "tools[0].function.description", NULL },
	/* arguments are an object (issue 40.4: the decoder wrote 0, the
	 * parser found no call) */
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"t\",\"parameters\":{\"type\":\"integer\"}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"t\"}}}", 400, "tools[0].function.parameters", "invalid_function_parameters" },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"t\",\"parameters\":{\"type\":[\"object\",\"null\"]}}}]}", 400, "tools[0].function.parameters", "invalid_function_parameters" },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 400, "tools[1].function.name", NULL },
	{ "{" M U ",\"tool_choice\":\"required\"}", 400, "tool_choice", NULL },
	/* template arguments: enable_thinking only, a boolean */
	{ "{" M U ",\"chat_template_kwargs\":{\"add_generation_prompt\":false}}", 400, "chat_template_kwargs", "unknown_parameter" },
	{ "{" M U ",\"chat_template_kwargs\":{\"enable_thinking\":1}}", 400, "chat_template_kwargs.enable_thinking", NULL },
	{ "{" M U ",\"chat_template_kwargs\":\"x\"}", 400, "chat_template_kwargs", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":[]}]}", 400, "messages[1].reasoning_content", NULL },
	{ "{" M U ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}", 400, "tool_choice.function.name", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\"}}", 400, "tool_choice.function.name", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", 400, "tool_choice.function.name", NULL },
	{ "{" M U ",\"tool_choice\":{\"type\":\"other\"}}", 400, "tool_choice.type", NULL },
	{ "{" M U ",\"tool_choice\":\"sometimes\"}", 400, "tool_choice", NULL },
	{ "{" M U ",\"tool_choice\":3}", 400, "tool_choice", NULL },
	{ "{" M U ",\"parallel_tool_calls\":\"yes\"}", 400, "parallel_tool_calls", NULL },
	/* stream */
	{ "{" M U ",\"stream\":1}", 400, "stream", NULL },
	{ "{" M U ",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options", NULL },
	{ "{" M U ",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", 400, "stream_options.include_usage", NULL },
	{ "{" M U ",\"stream\":true,\"stream_options\":{\"other\":1}}", 400, "stream_options", NULL },
	{ "{" M U ",\"stream\":true,\"stream_options\":{\"include_obfuscation\":\"no\"}}", 400, "stream_options.include_obfuscation", NULL },
	/* served or refused, never accepted and ignored */
	{ "{" M U ",\"reasoning_effort\":\"lots\"}", 400, "reasoning_effort", NULL },
	{ "{" M U ",\"verbosity\":\"low\"}", 400, "verbosity", "unsupported_value" },
	{ "{" M U ",\"verbosity\":\"high\"}", 400, "verbosity", "unsupported_value" },
	{ "{" M U ",\"store\":true}", 400, "store", "unsupported_value" },
	{ "{" M U ",\"service_tier\":\"flex\"}", 400, "service_tier", "unsupported_value" },
	{ "{" M U ",\"service_tier\":\"priority\"}", 400, "service_tier", "unsupported_value" },
	{ "{" M U ",\"prompt_cache_retention\":\"24h\"}", 400, "prompt_cache_retention", "unsupported_value" },
	{ "{" M U ",\"safety_identifier\":\"0123456789012345678901234567890123456789012345678901234567890123456789\"}", 400, "safety_identifier", NULL },
	{ "{" M U ",\"metadata\":{\"a\":1}}", 400, "metadata", NULL },
	/* sampling */
	{ "{" M U ",\"temperature\":2.5}", 400, "temperature", NULL },
	{ "{" M U ",\"temperature\":-0.1}", 400, "temperature", NULL },
	{ "{" M U ",\"temperature\":\"hot\"}", 400, "temperature", NULL },
	{ "{" M U ",\"top_p\":1.5}", 400, "top_p", NULL },
	{ "{" M U ",\"seed\":1.5}", 400, "seed", NULL },
	{ "{" M U ",\"max_tokens\":0}", 400, "max_tokens", NULL },
	{ "{" M U ",\"max_tokens\":\"10\"}", 400, "max_tokens", NULL },
	{ "{" M U ",\"max_completion_tokens\":-1}", 400, "max_completion_tokens", NULL },
	{ "{" M U ",\"max_tokens\":5,\"max_completion_tokens\":6}", 400, "max_tokens", NULL },
	{ "{" M U ",\"max_tokens\":99999999999}", 400, "max_tokens", NULL },
	{ "{" M U ",\"n\":17}", 400, "n", NULL },
	{ "{" M U ",\"n\":0}", 400, "n", NULL },
	{ "{" M U ",\"n\":\"1\"}", 400, "n", NULL },
	{ "{" M U ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop", NULL },
	{ "{" M U ",\"stop\":[\"a\",3]}", 400, "stop[1]", NULL },
	{ "{" M U ",\"stop\":\"\"}", 400, "stop", NULL },
	{ "{" M U ",\"stop\":7}", 400, "stop", NULL },
	{ "{" M U ",\"logprobs\":\"yes\"}", 400, "logprobs", NULL },
	{ "{" M U ",\"logprobs\":true,\"top_logprobs\":21}", 400, "top_logprobs", NULL },
	{ "{" M U ",\"top_logprobs\":2}", 400, "top_logprobs", NULL },
	{ "{" M U ",\"frequency_penalty\":3}", 400, "frequency_penalty", NULL },
	{ "{" M U ",\"user\":5}", 400, "user", NULL },
	{ "{" M U ",\"prompt_cache_key\":[]}", 400, "prompt_cache_key", NULL },
	/* response_format and the rest */
	{ "{" M U ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}", 400, "response_format.json_schema.schema", NULL },
	{ "{" M U ",\"response_format\":{\"type\":\"json_schema\"}}", 400, "response_format.json_schema", NULL },
	{ "{" M U ",\"response_format\":{\"type\":\"yaml\"}}", 400, "response_format.type", NULL },
	{ "{" M U ",\"response_format\":\"text\"}", 400, "response_format", NULL },
	{ "{" M U ",\"logit_bias\":{\"abc\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"-1\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"007\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"5\":101}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"5\":\"1\"}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":[1]}", 400, "logit_bias", NULL },
	{ "{" M U ",\"top_k\":-2}", 400, "top_k", NULL },
	{ "{" M U ",\"top_k\":1.5}", 400, "top_k", NULL },
	{ "{" M U ",\"min_p\":1.5}", 400, "min_p", NULL },
	{ "{" M U ",\"repetition_penalty\":0}", 400, "repetition_penalty", NULL },
	{ "{" M U ",\"repetition_penalty\":11}", 400, "repetition_penalty", NULL },
	{ "{" M U ",\"repeat_penalty\":-1}", 400, "repeat_penalty", NULL },
	{ "{" M U ",\"repetition_penalty\":1.1,\"repeat_penalty\":1.2}", 400, "repeat_penalty", NULL },
	{ "{" M U ",\"presence_penalty\":-2.5}", 400, "presence_penalty", NULL },
	{ "{" M U ",\"ignore_eos\":1}", 400, "ignore_eos", NULL },
	{ "{" M U ",\"kvarena\":{\"close_in_budget\":1}}", 400, "kvarena.close_in_budget", NULL },
	{ "{" M U ",\"kvarena\":{\"x\":1}}", 400, "kvarena", "unknown_parameter" },
	{ "{" M U ",\"kvarena\":[]}", 400, "kvarena", NULL },
	{ "{" M U ",\"functions\":[]}", 400, "functions", "unsupported_parameter" },
	{ "{" M U ",\"audio\":{}}", 400, "audio", "unsupported_parameter" },
	{ "{" M U ",\"modalities\":[\"audio\"]}", 400, "modalities", NULL },
	{ "{" M U ",\"modalities\":[5]}", 400, "modalities", NULL },
	{ "{" M U ",\"metadata\":[]}", 400, "metadata", NULL },
	{ "{" M U ",\"store\":\"no\"}", 400, "store", NULL },
	/* the sweep of round 16: a request only this check refuses */
	{ "{" M U ",\"prediction\":{}}", 400, "prediction", "unsupported_parameter" },
	{ "{" M U ",\"web_search_options\":{}}", 400, "web_search_options", "unsupported_parameter" },
	{ "{" M U ",\"function_call\":\"auto\"}", 400, "function_call", "unsupported_parameter" },
	{ "{" M U ",\"modalities\":\"text\"}", 400, "modalities", NULL },
	{ "{" M U ",\"logit_bias\":{\"\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"5x\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"00\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"2147483648\":1}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"logit_bias\":{\"5\":-101}}", 400, "logit_bias", NULL },
	{ "{" M U ",\"stop\":[\"a\",\"\"]}", 400, "stop[1]", NULL },
	{ "{" M U ",\"top_k\":2147483648}", 400, "top_k", NULL },
	{ "{" M U ",\"min_p\":-0.1}", 400, "min_p", NULL },
	{ "{" M U ",\"repeat_penalty\":0}", 400, "repetition_penalty", NULL },
	{ "{" M U ",\"repeat_penalty\":10.5}", 400, "repeat_penalty", NULL },
	{ "{" M U ",\"thinking_budget_tokens\":-2}", 400, "thinking_budget_tokens", NULL },
	{ "{" M U ",\"reasoning_budget_tokens\":1.5}", 400, "reasoning_budget_tokens", NULL },
	{ "{" M U ",\"thinking_budget_tokens\":4294967296}", 400, "thinking_budget_tokens", NULL },
	{ "{" M U ",\"thinking_budget_tokens\":5,\"reasoning_budget_tokens\":6}", 400, "reasoning_budget_tokens", NULL },
	{ "{" M U ",\"reasoning_format\":5}", 400, "reasoning_format", NULL },
	{ "{" M U ",\"reasoning_format\":\"parsed\"}", 400, "reasoning_format", "unsupported_value" },
	{ "{" M U ",\"response_format\":{}}", 400, "response_format.type", NULL },
	{ "{" M U ",\"response_format\":{\"type\":5}}", 400, "response_format.type", NULL },
	{ "{" M U ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":5}}", 400, "response_format.json_schema", NULL },
	{ "{" M U ",\"tools\":[5]}", 400, "tools[0]", NULL },
	{ "{" M U ",\"tools\":[{\"function\":{\"name\":\"f\"}}]}", 400, "tools[0].type", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":5}]}", 400, "tools[0].function", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
	  "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}", 400, "tools[2].function.name", NULL },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
	  "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 400, "tools[2].function.name", NULL },
	{ "{" M U ",\"tool_choice\":{\"type\":5}}", 400, "tool_choice.type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[5]}]}", 400, "messages[0].tool_calls[0]", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\"}]}]}", 400, "messages[0].tool_calls[0].function", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":5}]}]}", 400, "messages[0].tool_calls[0].function", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].function.name", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\"}}]}]}", 400, "messages[0].tool_calls[0].function.arguments", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":5,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}", 400, "messages[0].tool_calls[0].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
	  "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}]}", 400, "messages[2].tool_call_id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"r\"}]}", 400, "messages[0].tool_call_id", NULL },
	{ "{" M "\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"c\"}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"system\"}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"developer\",\"content\":null}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"assistant\",\"content\":5}]}", 400, "messages[0].content", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":5,\"text\":\"x\"}]}]}", 400, "messages[0].content[0].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", 400, "messages[0].content[0].text", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\"}]}]}", 400, "messages[0].content[1].type", NULL },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"x\"},5]}", 400, "messages[1]", NULL },
	{ "{" M U ",\"stream\":true,\"stream_options\":[]}", 400, "stream_options", NULL },
	{ "{" M U ",\"stream_options\":{}}", 400, "stream_options", NULL },
	{ "{" M U ",\"service_tier\":\"scale\"}", 400, "service_tier", "unsupported_value" },
	{ "{" M U ",\"service_tier\":\"other\"}", 400, "service_tier", NULL },
	{ "{" M U ",\"verbosity\":5}", 400, "verbosity", NULL },
	{ "{" M U ",\"reasoning_effort\":5}", 400, "reasoning_effort", NULL },
	{ "{" M U ",\"n\":1.0}", 400, "n", NULL },
	{ "{" M U ",\"logprobs\":false,\"top_logprobs\":0}", 400, "top_logprobs", NULL },
	{ "{" M U ",\"top_logprobs\":-1,\"logprobs\":true}", 400, "top_logprobs", NULL },
	{ "{" M U ",\"top_p\":-0.01}", 400, "top_p", NULL },
	{ "{" M U ",\"presence_penalty\":2.01}", 400, "presence_penalty", NULL },
	{ "{" M U ",\"frequency_penalty\":-2.01}", 400, "frequency_penalty", NULL },
	{ "{" M U ",\"max_completion_tokens\":4294967296}", 400, "max_completion_tokens", NULL },
	{ "{" M U ",\"seed\":\"1\"}", 400, "seed", NULL },
	{ "{" M U ",\"user\":null,\"prompt_cache_key\":5}", 400, "prompt_cache_key", NULL },
};

static void test_request_invalid(void)
{
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		struct chat_request r;
		struct api_error e;
		int rc = parse(bads[i].body, &r, &e);
		char *js;
		json_t *j;

		chat_request_free(&r);
		if (rc != -1 || e.status != bads[i].status ||
		    strcmp(e.param, bads[i].param ? bads[i].param : "") ||
		    (bads[i].code && (!e.code || strcmp(e.code, bads[i].code))))
			fprintf(stderr, "\nbad[%zu] %s: rc %d status %d param '%s' code %s: %s\n",
				i, bads[i].body, rc, e.status, e.param,
				e.code ? e.code : "null", e.message);
		CU_ASSERT_EQUAL(rc, -1);
		CU_ASSERT_EQUAL(e.status, bads[i].status);
		CU_ASSERT_STRING_EQUAL(e.param, bads[i].param ? bads[i].param : "");
		if (bads[i].code)
			CU_ASSERT(e.code && !strcmp(e.code, bads[i].code));
		CU_ASSERT(strlen(e.message) > 10);
		/* the body is OpenAI's shape, valid JSON */
		js = api_error_json(&e);
		CU_ASSERT_PTR_NOT_NULL_FATAL(js);
		j = json_loads(js, 0, NULL);
		CU_ASSERT(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
		CU_ASSERT(json_is_string(json_object_get(json_object_get(j, "error"), "type")));
		CU_ASSERT(json_object_get(json_object_get(j, "error"), "param") != NULL);
		CU_ASSERT(json_object_get(json_object_get(j, "error"), "code") != NULL);
		json_decref(j);
		free(js);
	}
	/* an integer out of range: the error names the range */
	{
		struct chat_request r;
		struct api_error e;
		char want[64];

		CU_ASSERT_EQUAL(parse("{" M U ",\"n\":17}", &r, &e), -1);
		snprintf(want, sizeof(want), "not within [1, %d]", CHAT_MAX_CHOICES);
		CU_ASSERT_PTR_NOT_NULL(strstr(e.message, want));
		chat_request_free(&r);
	}
	/* the deprecated function role: the error says what to use instead */
	{
		struct chat_request r;
		struct api_error e;

		CU_ASSERT_EQUAL(parse("{" M "\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}",
				      &r, &e), -1);
		CU_ASSERT(strstr(e.message, "deprecated") && strstr(e.message, "use 'tool'"));
		chat_request_free(&r);
	}
}

/* Every strict prefix of a valid body is refused (and nothing crashes). */
static void test_request_truncated(void)
{
	const char *body = "{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"h\xc3\xa9llo\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],\"stop\":[\"x\"]}";
	size_t n = strlen(body);
	struct chat_request r;
	struct api_error e;

	for (size_t k = 0; k < n; k++) {
		CU_ASSERT_EQUAL(chat_request_parse(body, k, MODEL, &r, &e), -1);
		CU_ASSERT_EQUAL(e.status, 400);
		chat_request_free(&r);
	}
	CU_ASSERT_EQUAL(chat_request_parse(body, n, MODEL, &r, &e), 0);
	chat_request_free(&r);
}

/* Sizes are bounded: too many messages, tools, content parts, stop
 * strings too long. */
static void test_request_bounds(void)
{
	struct strbuf b = { 0 };
	struct chat_request r;
	struct api_error e;

	sb_adds(&b, "{" M "\"messages\":[");
	for (int i = 0; i <= CHAT_MAX_MESSAGES; i++)
		sb_addf(&b, "%s{\"role\":\"user\",\"content\":\"m\"}", i ? "," : "");
	sb_adds(&b, "]}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT_STRING_EQUAL(e.param, "messages");
	chat_request_free(&r);
	sb_reset(&b);
	sb_adds(&b, "{" M U ",\"tools\":[");
	for (int i = 0; i <= CHAT_MAX_TOOLS; i++)
		sb_addf(&b, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
	sb_adds(&b, "]}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT_STRING_EQUAL(e.param, "tools");
	chat_request_free(&r);
	sb_reset(&b);
	sb_adds(&b, "{" M "\"messages\":[{\"role\":\"user\",\"content\":[");
	for (int i = 0; i <= CHAT_MAX_PARTS; i++)
		sb_addf(&b, "%s{\"type\":\"text\",\"text\":\"p\"}", i ? "," : "");
	sb_adds(&b, "]}]}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT_STRING_EQUAL(e.param, "messages[0].content");
	chat_request_free(&r);
	sb_reset(&b);
	sb_adds(&b, "{" M U ",\"stop\":\"");
	for (int i = 0; i <= KVD_MAX_STOP_LEN; i++)
		sb_adds(&b, "s");
	sb_adds(&b, "\"}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT_STRING_EQUAL(e.param, "stop");
	chat_request_free(&r);
	sb_reset(&b);
	sb_adds(&b, "{" M U ",\"user\":\"");
	for (int i = 0; i <= CHAT_MAX_ID; i++)
		sb_adds(&b, "u");
	sb_adds(&b, "\"}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT_STRING_EQUAL(e.param, "user");
	chat_request_free(&r);
	/* a message of 1000 deep arrays: refused, not a stack overflow */
	sb_reset(&b);
	sb_adds(&b, "{" M U ",\"metadata\":");
	for (int i = 0; i < 100000; i++)
		sb_adds(&b, "[");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	chat_request_free(&r);
	sb_free(&b);
}

/* Parses {model, one user message<extra>}; 0 or -1, printing why. */
static int accept(const char *extra, struct chat_request *r)
{
	struct strbuf b = { 0 };
	struct api_error e;
	int rc;

	sb_addf(&b, "{" M U "%s}", extra);
	rc = chat_request_parse(b.s, b.len, MODEL, r, &e);
	if (rc)
		fprintf(stderr, "\nrefused %s: %s: %s\n", b.s, e.param, e.message);
	sb_free(&b);
	return rc;
}

/* Whether {model, one user message<extra>} is refused naming param. */
static int refused(const char *extra, const char *param)
{
	struct chat_request r;
	struct strbuf b = { 0 };
	struct api_error e;
	int rc;

	sb_addf(&b, "{" M U "%s}", extra);
	rc = chat_request_parse(b.s, b.len, MODEL, &r, &e);
	chat_request_free(&r);
	sb_free(&b);
	if (rc == -1 && e.status == 400 && !strcmp(e.param, param))
		return 1;
	fprintf(stderr, "\nnot refused as '%s': rc %d, '%s'\n", param, rc, rc ? e.param : "");
	return 0;
}

/* A string of n copies of c, JSON-quoted (for the size limits). */
static char *quoted(size_t n, char c)
{
	char *s = malloc(n + 3);

	s[0] = '"';
	memset(s + 1, c, n);
	s[n + 1] = '"';
	s[n + 2] = 0;
	return s;
}

/*
 * Round 16's sweep of chat_request.c (Documentation/testing.md): each range
 * limit taken at its end (the refusal one past it is in bads[]), each
 * default and each value stored where the request says it goes.
 */
static void test_request_limits(void)
{
	struct chat_request r;
	struct api_error e;
	struct strbuf b = { 0 };
	char x[256];
	char *q;

	/* integers at both ends (param_int's bounds) */
	CU_ASSERT_EQUAL_FATAL(accept(",\"top_k\":-1,\"n\":16,\"logprobs\":true,\"top_logprobs\":20,"
				     "\"max_tokens\":4294967295,\"thinking_budget_tokens\":-1", &r), 0);
	CU_ASSERT(r.s.top_k == 0 && r.n == 16 && r.s.top_logprobs == 20 && r.s.max_tokens == UINT32_MAX &&
		  r.think_budget == 0 && r.thinking == CHAT_THINK_DEFAULT);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"top_k\":2147483647,\"n\":2,\"logprobs\":true,\"top_logprobs\":0,"
				     "\"max_completion_tokens\":1,\"seed\":0", &r), 0);
	CU_ASSERT(r.s.top_k == INT32_MAX && r.n == 2 && r.s.top_logprobs == 0 && r.s.logprobs &&
		  r.s.max_tokens == 1 && r.s.has_seed && r.s.seed == 0);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"top_k\":1,\"max_tokens\":7,\"max_completion_tokens\":7,"
				     "\"logprobs\":true,\"top_logprobs\":null", &r), 0);
	CU_ASSERT(r.s.top_k == 1 && r.s.max_tokens == 7 && r.s.logprobs && r.s.top_logprobs == 0);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"top_k\":0,\"logprobs\":false", &r), 0);
	CU_ASSERT(r.s.top_k == 0 && !r.s.logprobs);
	chat_request_free(&r);

	/* numbers at their ends, and the two names of the repetition
	 * penalty (equal values are one setting) */
	CU_ASSERT_EQUAL_FATAL(accept(",\"min_p\":1,\"repetition_penalty\":10", &r), 0);
	CU_ASSERT(r.s.min_p == 1 && r.s.repetition_penalty == 10);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"min_p\":0,\"repeat_penalty\":10", &r), 0);
	CU_ASSERT(r.s.min_p == 0 && r.s.repetition_penalty == 10);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"repetition_penalty\":0.5,\"repeat_penalty\":0.5", &r), 0);
	CU_ASSERT(r.s.repetition_penalty == 0.5f);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"repeat_penalty\":0.25,\"repetition_penalty\":null", &r), 0);
	CU_ASSERT(r.s.repetition_penalty == 0.25f);	/* null is absent: the other name counts */
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"repeat_penalty\":0.25", &r), 0);
	CU_ASSERT(r.s.repetition_penalty == 0.25f);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept("", &r), 0);
	CU_ASSERT(r.s.frequency_penalty == 0 && r.s.presence_penalty == 0 && r.s.min_p == 0 &&
		  r.s.top_k == 0 && !r.s.has_seed && r.s.seed == 0 && !r.obfuscate &&
		  !r.include_usage && r.format == CHAT_FORMAT_TEXT && !r.reasoning_inline &&
		  r.think_budget == 0 && r.s.logit_bias == NULL && r.s.n_stop == 0);
	chat_request_free(&r);

	/* logit_bias: ids 0 and INT32_MAX, biases at both ends, an empty
	 * object (no table), KVD_MAX_LOGIT_BIAS entries and one more */
	CU_ASSERT_EQUAL_FATAL(accept(",\"logit_bias\":{\"0\":100,\"2147483647\":-100}", &r), 0);
	CU_ASSERT_EQUAL_FATAL(r.s.n_logit_bias, 2);
	CU_ASSERT(r.s.logit_bias[0].token == 0 && r.s.logit_bias[0].bias == 100);
	CU_ASSERT(r.s.logit_bias[1].token == INT32_MAX && r.s.logit_bias[1].bias == -100);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"logit_bias\":{}", &r), 0);
	CU_ASSERT(r.s.n_logit_bias == 0 && r.s.logit_bias == NULL && r.bias == NULL);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"logit_bias\":null", &r), 0);
	CU_ASSERT(r.s.n_logit_bias == 0 && r.s.logit_bias == NULL);
	chat_request_free(&r);
	for (int more = 0; more < 2; more++) {
		sb_adds(&b, ",\"logit_bias\":{");
		for (int i = 0; i < KVD_MAX_LOGIT_BIAS + more; i++)
			sb_addf(&b, "%s\"%d\":1", i ? "," : "", i);
		sb_adds(&b, "}");
		if (!more) {
			CU_ASSERT_EQUAL(accept(b.s, &r), 0);
			CU_ASSERT_EQUAL(r.s.n_logit_bias, KVD_MAX_LOGIT_BIAS);
			chat_request_free(&r);
		} else {
			CU_ASSERT(refused(b.s, "logit_bias"));
		}
		sb_free(&b);
	}

	/* stop: KVD_MAX_STOP strings of KVD_MAX_STOP_LEN bytes */
	q = quoted(KVD_MAX_STOP_LEN, 's');
	sb_addf(&b, ",\"stop\":[\"a\",\"b\",\"c\",%s]", q);
	CU_ASSERT_EQUAL_FATAL(accept(b.s, &r), 0);
	CU_ASSERT_EQUAL(r.s.n_stop, KVD_MAX_STOP);
	CU_ASSERT(!strcmp(r.s.stop[0], "a") && strlen(r.s.stop[3]) == KVD_MAX_STOP_LEN);
	chat_request_free(&r);
	sb_free(&b);
	free(q);
	CU_ASSERT_EQUAL_FATAL(accept(",\"stop\":null", &r), 0);
	CU_ASSERT_EQUAL(r.s.n_stop, 0);
	chat_request_free(&r);

	/* strings at their limits: model 256 (404, not 400), one past (400),
	 * metadata 16 pairs of 64-byte keys and 512-byte values, safety
	 * identifier 64, user and cache key CHAT_MAX_ID */
	q = quoted(256, 'm');
	sb_addf(&b, "{\"model\":%s," U "}", q);
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT(e.status == 404 && !strcmp(e.param, "model"));
	chat_request_free(&r);
	sb_free(&b);
	free(q);
	q = quoted(257, 'm');
	sb_addf(&b, "{\"model\":%s," U "}", q);
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
	CU_ASSERT(e.status == 400 && !strcmp(e.param, "model"));
	chat_request_free(&r);
	sb_free(&b);
	free(q);
	for (int over = 0; over < 4; over++) {
		/* over: 0 all at their limits, 1 a 17th pair, 2 a 65-byte key,
		 * 3 a 513-byte value */
		sb_adds(&b, ",\"metadata\":{");
		for (int i = 0; i < 16 + (over == 1); i++) {
			char *v = quoted(512 + (over == 3 && i == 5), 'v');
			size_t kl = 64 + (over == 2 && i == 3);

			memset(x, 'k', kl);
			x[0] = (char)('a' + i);	/* keys differ */
			x[kl] = 0;
			sb_addf(&b, "%s\"%s\":%s", i ? "," : "", x, v);
			free(v);
		}
		sb_adds(&b, "}");
		if (!over) {
			CU_ASSERT_EQUAL(accept(b.s, &r), 0);
			chat_request_free(&r);
		} else {
			CU_ASSERT(refused(b.s, "metadata"));
		}
		sb_free(&b);
	}
	q = quoted(64, 's');
	snprintf(x, sizeof(x), ",\"safety_identifier\":%s", q);
	CU_ASSERT_EQUAL(accept(x, &r), 0);
	chat_request_free(&r);
	free(q);
	q = quoted(65, 's');
	snprintf(x, sizeof(x), ",\"safety_identifier\":%s", q);
	CU_ASSERT(refused(x, "safety_identifier"));
	free(q);
	q = quoted(CHAT_MAX_ID, 'u');
	sb_addf(&b, ",\"user\":%s,\"prompt_cache_key\":%s", q, q);
	CU_ASSERT_EQUAL(accept(b.s, &r), 0);
	CU_ASSERT(r.user && strlen(r.user) == CHAT_MAX_ID && r.prompt_cache_key &&
		  strlen(r.prompt_cache_key) == CHAT_MAX_ID);
	chat_request_free(&r);
	sb_free(&b);
	free(q);
}

/* Round 16's sweep, continued: what each accepted shape stores. */
static void test_request_stored(void)
{
	struct chat_request r;
	struct strbuf b = { 0 };
	char *q;

	/* tool_choice's strings and response formats */
	CU_ASSERT_EQUAL_FATAL(accept(",\"tool_choice\":\"none\",\"response_format\":{\"type\":\"json_object\"}", &r), 0);
	CU_ASSERT(r.tool_choice == CHAT_TOOLS_NONE && r.format == CHAT_FORMAT_JSON_OBJECT &&
		  r.json_schema == NULL);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":null,\"strict\":null}}],"
				     "\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_schema\","
				     "\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\"}}}", &r), 0);
	CU_ASSERT(r.tool_choice == CHAT_TOOLS_REQUIRED && r.format == CHAT_FORMAT_JSON_SCHEMA &&
		  json_is_object(r.json_schema) && r.n_tools == 1);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
				     "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
				     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
				     "\"response_format\":null", &r), 0);
	CU_ASSERT(r.tool_choice == CHAT_TOOLS_NAMED && !strcmp(r.tool_choice_name, "g") &&
		  r.format == CHAT_FORMAT_TEXT && r.n_tools == 2 && !strcmp(r.tools[1].name, "g"));
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"tools\":[],\"tool_choice\":null", &r), 0);
	CU_ASSERT(r.n_tools == 0 && r.tools == NULL && r.tool_choice == CHAT_TOOLS_AUTO);
	chat_request_free(&r);

	/* stream_options: each key goes where it says */
	CU_ASSERT_EQUAL_FATAL(accept(",\"stream\":true,\"stream_options\":{\"include_obfuscation\":true}", &r), 0);
	CU_ASSERT(r.stream && r.obfuscate && !r.include_usage);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"stream\":true,\"stream_options\":{\"include_usage\":null,"
				     "\"include_obfuscation\":false}", &r), 0);
	CU_ASSERT(r.stream && !r.obfuscate && !r.include_usage);
	chat_request_free(&r);
	CU_ASSERT_EQUAL_FATAL(accept(",\"stream\":true,\"stream_options\":{\"include_usage\":false,"
				     "\"include_obfuscation\":null}", &r), 0);
	CU_ASSERT(r.stream && !r.obfuscate && !r.include_usage);
	chat_request_free(&r);

	/* served values, and null for each */
	CU_ASSERT_EQUAL(accept(",\"service_tier\":\"default\",\"verbosity\":null,\"store\":null,"
			       "\"modalities\":[],\"metadata\":null,\"audio\":null,\"prediction\":null,"
			       "\"web_search_options\":null,\"functions\":null,\"function_call\":null,"
			       "\"prompt_cache_retention\":\"in-memory\",\"reasoning_effort\":null,"
			       "\"kvarena\":null,\"logprobs\":null,\"seed\":null,\"n\":null", &r), 0);
	CU_ASSERT(r.n == 1 && !r.s.has_seed && r.thinking == CHAT_THINK_DEFAULT);
	chat_request_free(&r);
	CU_ASSERT_EQUAL(accept(",\"modalities\":null,\"kvarena\":{\"close_in_budget\":false}", &r), 0);
	CU_ASSERT(!r.s.close_in_budget);
	chat_request_free(&r);

	/* llama.cpp's reasoning format and budget */
	{
		static const struct {
			const char *extra;
			int inline_, thinking;
			uint32_t budget;
		} rb[] = {
			{ ",\"reasoning_format\":\"none\"", 1, CHAT_THINK_DEFAULT, 0 },
			{ ",\"reasoning_format\":\"auto\"", 0, CHAT_THINK_DEFAULT, 0 },
			{ ",\"reasoning_format\":\"deepseek\",\"thinking_budget_tokens\":0", 0, CHAT_THINK_OFF, 0 },
			{ ",\"reasoning_format\":null,\"thinking_budget_tokens\":1", 0, CHAT_THINK_DEFAULT, 1 },
			{ ",\"reasoning_budget_tokens\":4294967295", 0, CHAT_THINK_DEFAULT, UINT32_MAX },
			{ ",\"reasoning_budget_tokens\":0", 0, CHAT_THINK_OFF, 0 },
			{ ",\"thinking_budget_tokens\":9,\"reasoning_budget_tokens\":9", 0, CHAT_THINK_DEFAULT, 9 },
			{ ",\"thinking_budget_tokens\":null,\"reasoning_budget_tokens\":-1", 0, CHAT_THINK_DEFAULT, 0 },
			{ ",\"thinking_budget_tokens\":0,\"chat_template_kwargs\":{\"enable_thinking\":true}", 0, CHAT_THINK_ON, 0 },
			{ ",\"reasoning_effort\":\"minimal\",\"thinking_budget_tokens\":5", 0, CHAT_THINK_OFF, 5 },
		};

		for (size_t i = 0; i < sizeof(rb) / sizeof(rb[0]); i++) {
			CU_ASSERT_EQUAL_FATAL(accept(rb[i].extra, &r), 0);
			if (r.reasoning_inline != rb[i].inline_ || (int)r.thinking != rb[i].thinking ||
			    r.think_budget != rb[i].budget)
				fprintf(stderr, "\nreasoning %s: inline %d thinking %d budget %u\n",
					rb[i].extra, r.reasoning_inline, r.thinking, r.think_budget);
			CU_ASSERT_EQUAL(r.reasoning_inline, rb[i].inline_);
			CU_ASSERT_EQUAL((int)r.thinking, rb[i].thinking);
			CU_ASSERT_EQUAL(r.think_budget, rb[i].budget);
			chat_request_free(&r);
		}
	}

	/* messages: parallel calls answered in any order, a call without a
	 * type (or null), no calls ([]), empty parts, the deprecated name
	 * of the system role */
	CU_ASSERT_EQUAL_FATAL(parse("{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
				    "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"1\"}},"
				    "{\"id\":\"b\",\"type\":null,\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},"
				    "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"rb\"},"
				    "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":[{\"type\":\"text\",\"text\":\"\"}]},"
				    "{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[]},"
				    "{\"role\":\"user\",\"content\":[]}]}", &r, &(struct api_error){ 0 }), 0);
	CU_ASSERT_EQUAL_FATAL(r.n_msgs, 6);
	CU_ASSERT(r.msgs[1].n_calls == 2 && !strcmp(r.msgs[1].calls[1].id, "b") &&
		  !strcmp(r.msgs[1].calls[1].name, "g") && r.msgs[1].calls[1].arguments_len == 0 &&
		  r.msgs[1].calls[0].arguments_len == 1 && r.msgs[1].content_len == 0);
	CU_ASSERT(r.msgs[2].role == CHAT_TOOL && !strcmp(r.msgs[2].tool_call_id, "b"));
	CU_ASSERT(r.msgs[3].role == CHAT_TOOL && r.msgs[3].content_len == 0 &&
		  !strcmp(r.msgs[3].content, ""));
	CU_ASSERT(r.msgs[4].n_calls == 0 && r.msgs[4].calls == NULL && r.msgs[4].content_len == 1);
	CU_ASSERT(r.msgs[5].role == CHAT_USER && r.msgs[5].content_len == 0);
	chat_request_free(&r);

	/* sizes at their limits: CHAT_MAX_PARTS parts, CHAT_MAX_CALLS calls
	 * and one more, CHAT_MAX_TOOLS tools, a 64 KiB description and one
	 * byte more, a 64-byte role (not one past) */
	sb_adds(&b, "{" M "\"messages\":[{\"role\":\"user\",\"content\":[");
	for (int i = 0; i < CHAT_MAX_PARTS; i++)
		sb_addf(&b, "%s{\"type\":\"text\",\"text\":\"p\"}", i ? "," : "");
	sb_adds(&b, "]}]}");
	CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &(struct api_error){ 0 }), 0);
	CU_ASSERT_EQUAL(r.msgs[0].content_len, CHAT_MAX_PARTS);
	chat_request_free(&r);
	sb_free(&b);
	for (int more = 0; more < 2; more++) {
		struct api_error e;

		sb_adds(&b, "{" M "\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[");
		for (int i = 0; i < CHAT_MAX_CALLS + more; i++)
			sb_addf(&b, "%s{\"id\":\"c%d\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}",
				i ? "," : "", i);
		sb_adds(&b, "]}]}");
		CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), more ? -1 : 0);
		if (more) {
			CU_ASSERT_STRING_EQUAL(e.param, "messages[0].tool_calls");
		} else {
			CU_ASSERT_EQUAL(r.msgs[0].n_calls, CHAT_MAX_CALLS);
		}
		chat_request_free(&r);
		sb_free(&b);
	}
	sb_adds(&b, ",\"tools\":[");
	for (int i = 0; i < CHAT_MAX_TOOLS; i++)
		sb_addf(&b, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
	sb_adds(&b, "]");
	CU_ASSERT_EQUAL(accept(b.s, &r), 0);
	CU_ASSERT_EQUAL(r.n_tools, CHAT_MAX_TOOLS);
	chat_request_free(&r);
	sb_free(&b);
	for (int more = 0; more < 2; more++) {
		q = quoted(64 * 1024 + more, 'd');
		sb_addf(&b, ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":%s}}]", q);
		if (more) {
			CU_ASSERT(refused(b.s, "tools[0].function.description"));
		} else {
			CU_ASSERT_EQUAL(accept(b.s, &r), 0);
			chat_request_free(&r);
		}
		sb_free(&b);
		free(q);
	}
	for (int more = 0; more < 2; more++) {
		struct api_error e;

		q = quoted(64 + more, 'r');
		sb_addf(&b, "{" M "\"messages\":[{\"role\":%s,\"content\":\"x\"}]}", q);
		CU_ASSERT_EQUAL(chat_request_parse(b.s, b.len, MODEL, &r, &e), -1);
		CU_ASSERT_STRING_EQUAL(e.param, "messages[0].role");
		/* 64 bytes is a role we do not know; 65 is too long */
		CU_ASSERT_EQUAL(!!strstr(e.message, "too long"), more);
		chat_request_free(&r);
		sb_free(&b);
		free(q);
	}
}

/*
 * Each of the parser's allocations failing in turn (messages, a message's
 * tool calls, tools, logit_bias): a 500 out of memory, never a crash, a
 * half-filled request taken or a leak (ASan's check at exit).
 */
static void test_request_oom(void)
{
	const char *body = "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
		"{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
		"{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}],"
		"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
		"\"logit_bias\":{\"3\":1}}";
	long k;

	for (k = 0; k < 100; k++) {
		struct chat_request r;
		struct api_error e;
		int rc;

		callocs = 0;
		fail_at = k;
		rc = parse(body, &r, &e);
		fail_at = -1;
		if (callocs <= k) {	/* calloc k never happened: done */
			CU_ASSERT_EQUAL(rc, 0);
			CU_ASSERT(r.n_msgs == 3 && r.n_tools == 1 && r.s.n_logit_bias == 1);
			chat_request_free(&r);
			break;
		}
		if (rc != -1 || e.status != 500)
			fprintf(stderr, "\ncalloc %ld failing: rc %d status %d %s\n", k, rc,
				rc ? e.status : 0, rc ? e.message : "");
		CU_ASSERT_EQUAL(rc, -1);
		CU_ASSERT_EQUAL(e.status, 500);
		CU_ASSERT_STRING_EQUAL(e.type, "server_error");
		chat_request_free(&r);
	}
	CU_ASSERT_EQUAL(k, 4);	/* the four above, each failed once */
}

/*
 * jansson's allocations failing: the request's keep array (the first
 * allocation chat_request_begin makes) is a 500, and chat_request_keep
 * says NULL when its copy or the array's growth fails, never handing
 * back a string the failed append freed.
 */
static void test_request_json_oom(void)
{
	struct chat_request r;
	struct api_error e;
	const char *body = "{" M U "}";
	int kept = 0;

	json_allocs = 0;
	json_fail_at = 0;
	CU_ASSERT_EQUAL(parse(body, &r, &e), -1);
	json_fail_at = -1;
	CU_ASSERT(e.status == 500 && !strcmp(e.type, "server_error"));
	chat_request_free(&r);

	CU_ASSERT_EQUAL_FATAL(parse(body, &r, &e), 0);
	for (long k = 0; k < 64; k++) {
		const char *s;

		json_allocs = 0;
		json_fail_at = k;
		s = chat_request_keep(&r, "abc", 3);
		json_fail_at = -1;
		if (json_allocs <= k) {	/* nothing failed: kept */
			CU_ASSERT(s && !strcmp(s, "abc"));
			kept++;
		} else {
			CU_ASSERT_PTR_NULL(s);
		}
	}
	/* the array grew at least once under a failure, and went on */
	CU_ASSERT(kept > 8 && json_array_size(r.keep) == (size_t)kept);
	chat_request_free(&r);
}

/* body with every "@@" replaced by n copies of c (or by the list
 * printf(item, 0..n-1) joined by commas when item is set) */
static char *fill(const char *fmt, size_t n, char c, const char *item)
{
	struct strbuf b = { 0 };
	const char *at;

	while ((at = strstr(fmt, "@@"))) {
		sb_add(&b, fmt, (size_t)(at - fmt));
		for (size_t i = 0; i < n; i++) {
			if (item) {
				if (i)
					sb_adds(&b, ",");
				sb_addf(&b, item, i);
			} else {
				sb_add(&b, &c, 1);
			}
		}
		fmt = at + 2;
	}
	sb_adds(&b, fmt);
	return sb_steal(&b, NULL);
}

#define CALL(ID, NAME) "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"" ID \
	"\",\"type\":\"function\",\"function\":{\"name\":\"" NAME "\",\"arguments\":\"{}\"}}]}"

/*
 * Every limit from both sides: at the limit the request is taken (or,
 * where the value is never valid, refused for another reason), one past
 * it refused naming the parameter, with the message saying why. Bounds
 * checked from one side only let a limit move by one unnoticed.
 */
static const struct limit {
	const char *fmt;	/* "@@": the string or the list */
	const char *over;	/* the body one past the limit, when another */
	size_t limit;
	char c;
	const char *item;	/* a list entry's printf format, of its index */
	const char *param;
	const char *why;	/* in the message one past the limit */
	int ok_at_limit;
} limits[] = {
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}," CALL("@@", "f") "]}", NULL,
	  CHAT_MAX_ID, 'i', NULL, "messages[1].tool_calls[0].id", "too long", 1 },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}," CALL("c1", "@@") "]}", NULL,
	  TC_MAX_NAME, 'n', NULL, "messages[1].tool_calls[0].function.name", "too long", 1 },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"@@\"}]}", NULL,
	  CHAT_MAX_ID, 'n', NULL, "messages[0].name", "too long", 1 },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}," CALL("@@", "f")
	  ",{\"role\":\"tool\",\"tool_call_id\":\"@@\",\"content\":\"r\"}]}",
	  "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}," CALL("c1", "f")
	  ",{\"role\":\"tool\",\"tool_call_id\":\"@@\",\"content\":\"r\"}]}",
	  CHAT_MAX_ID, 't', NULL, "messages[2].tool_call_id", "too long", 1 },
	/* no role of 64 bytes exists: refused as unknown, not as long */
	{ "{" M "\"messages\":[{\"role\":\"@@\",\"content\":\"hi\"}]}", NULL,
	  64, 'r', NULL, "messages[0].role", "too long", 0 },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"@@\"}}]}", NULL,
	  TC_MAX_NAME, 'n', NULL, "tools[0].function.name", "too long", 1 },
	{ "{" M U ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"@@\"}}]}",
	  NULL, 64 * 1024, 'd', NULL, "tools[0].function.description", "too long", 1 },
	{ "{" M U ",\"safety_identifier\":\"@@\"}", NULL, 64, 's', NULL, "safety_identifier",
	  "too long", 1 },
	/* no model of 256 bytes is served: refused as unknown, not as long */
	{ "{\"model\":\"@@\"," U "}", NULL, 256, 'm', NULL, "model", "too long", 0 },
	{ "{" M U ",\"user\":\"@@\"}", NULL, CHAT_MAX_ID, 'u', NULL, "user", "too long", 1 },
	{ "{" M U ",\"prompt_cache_key\":\"@@\"}", NULL, CHAT_MAX_ID, 'k', NULL,
	  "prompt_cache_key", "too long", 1 },
	{ "{" M U ",\"stop\":\"@@\"}", NULL, KVD_MAX_STOP_LEN, 's', NULL, "stop", NULL, 1 },
	{ "{" M U ",\"metadata\":{\"k\":\"@@\"}}", NULL, 512, 'v', NULL, "metadata", "512", 1 },
	{ "{" M U ",\"metadata\":{\"@@\":\"v\"}}", NULL, 64, 'k', NULL, "metadata", "64", 1 },
	/* lists */
	{ "{" M "\"messages\":[@@]}", NULL, CHAT_MAX_MESSAGES, 0, "{\"role\":\"user\",\"content\":\"m%zu\"}", "messages", "at most", 1 },
	{ "{" M U ",\"tools\":[@@]}", NULL, CHAT_MAX_TOOLS, 0, "{\"type\":\"function\",\"function\":{\"name\":\"f%zu\"}}", "tools", "at most", 1 },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":[@@]}]}", NULL, CHAT_MAX_PARTS, 0,
	  "{\"type\":\"text\",\"text\":\"p%zu\"}", "messages[0].content", "at most", 1 },
	{ "{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
	  "\"content\":null,\"tool_calls\":[@@]}]}", NULL, CHAT_MAX_CALLS, 0, "{\"id\":\"c%zu\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}",
	  "messages[1].tool_calls", "at most", 1 },
	{ "{" M U ",\"metadata\":{@@}}", NULL, 16, 0, "\"k%zu\":\"v\"", "metadata", "16", 1 },
	{ "{" M U ",\"stop\":[@@]}", NULL, KVD_MAX_STOP, 0, "\"s%zu\"", "stop", NULL, 1 },
	{ "{" M U ",\"logit_bias\":{@@}}", NULL, KVD_MAX_LOGIT_BIAS, 0, "\"%zu\":1", "logit_bias",
	  "at most", 1 },
};

static void test_request_both_sides(void)
{
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		const struct limit *l = &limits[i];
		char *at = fill(l->fmt, l->limit, l->c, l->item);
		char *past = fill(l->over ? l->over : l->fmt, l->limit + 1, l->c, l->item);
		struct chat_request r;
		struct api_error e;
		int rc;

		rc = parse(at, &r, &e);
		if (l->ok_at_limit ? rc != 0 : rc != -1 || strstr(e.message, l->why))
			fprintf(stderr, "\nlimit[%zu] at %zu: rc %d %s\n", i, l->limit, rc,
				rc ? e.message : "");
		if (l->ok_at_limit)
			CU_ASSERT_EQUAL(rc, 0)
		else
			CU_ASSERT(rc == -1 && !strstr(e.message, l->why));
		chat_request_free(&r);
		rc = parse(past, &r, &e);
		if (rc != -1 || strcmp(e.param, l->param) || (l->why && !strstr(e.message, l->why)))
			fprintf(stderr, "\nlimit[%zu] past %zu: rc %d param '%s': %s\n", i, l->limit,
				rc, rc ? e.param : "", rc ? e.message : "");
		CU_ASSERT_EQUAL(rc, -1);
		CU_ASSERT_EQUAL(e.status, 400);
		CU_ASSERT_STRING_EQUAL(e.param, l->param);
		if (l->why)
			CU_ASSERT_PTR_NOT_NULL(strstr(e.message, l->why));
		chat_request_free(&r);
		free(at);
		free(past);
	}
}

/* Numbers at both ends of their ranges, and one past each. */
static const struct range {
	const char *key, *lo, *hi, *below, *above;
} ranges[] = {
	{ "n", "1", "16", "0", "17" },
	{ "top_logprobs", "0", "20", "-1", "21" },
	{ "max_tokens", "1", "4294967295", "0", "4294967296" },
	{ "max_completion_tokens", "1", "4294967295", "0", "4294967296" },
	{ "temperature", "0", "2", "-0.001", "2.001" },
	{ "top_p", "0", "1", "-0.001", "1.001" },
	{ "frequency_penalty", "-2", "2", "-2.001", "2.001" },
	{ "presence_penalty", "-2", "2", "-2.001", "2.001" },
	{ "seed", "-9223372036854775808", "9223372036854775807", NULL, NULL },
};

static void test_request_ranges(void)
{
	char body[512];

	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		const struct range *g = &ranges[i];
		const char *v[4] = { g->lo, g->hi, g->below, g->above };

		for (int k = 0; k < 4; k++) {
			struct chat_request r;
			struct api_error e;
			int rc;

			if (!v[k])
				continue;
			snprintf(body, sizeof(body), "{" M U ",\"%s\":%s%s}", g->key, v[k],
				 !strcmp(g->key, "top_logprobs") ? ",\"logprobs\":true" : "");
			rc = parse(body, &r, &e);
			if (rc != (k < 2 ? 0 : -1) || (k >= 2 && strcmp(e.param, g->key)))
				fprintf(stderr, "\nrange %s=%s: rc %d %s\n", g->key, v[k], rc,
					rc ? e.message : "");
			CU_ASSERT_EQUAL(rc, k < 2 ? 0 : -1);
			if (k >= 2)
				CU_ASSERT_STRING_EQUAL(e.param, g->key);
			if (!rc && !strcmp(g->key, "n"))
				CU_ASSERT_EQUAL(r.n, (unsigned)atoi(v[k]));
			if (!rc && !strcmp(g->key, "top_logprobs"))
				CU_ASSERT_EQUAL(r.s.top_logprobs, (uint32_t)atoi(v[k]));
			chat_request_free(&r);
		}
	}
	/* logit_bias: ids 0 and INT32_MAX and biases of +-100 taken; one
	 * past each, a leading zero, a sign refused */
	{
		static const char *const ok[] = { "{\"0\":-100}", "{\"2147483647\":100}",
						  "{\"10\":0.5,\"1\":-0.5}" };
		static const char *const bad[] = { "{\"2147483648\":1}", "{\"5\":100.001}",
						   "{\"5\":-100.001}", "{\"01\":1}", "{\"+5\":1}",
						   "{\"\":1}", "{\"5 \":1}", "{\" 5\":1}",
						   "{\"-0\":1}" };
		struct chat_request r;
		struct api_error e;

		for (size_t k = 0; k < 3; k++) {
			snprintf(body, sizeof(body), "{" M U ",\"logit_bias\":%s}", ok[k]);
			CU_ASSERT_EQUAL(parse(body, &r, &e), 0);
			if (k == 0)
				CU_ASSERT(r.s.n_logit_bias == 1 && r.s.logit_bias[0].token == 0 &&
					  r.s.logit_bias[0].bias == -100.0f);
			if (k == 1)
				CU_ASSERT(r.s.n_logit_bias == 1 &&
					  r.s.logit_bias[0].token == 2147483647 &&
					  r.s.logit_bias[0].bias == 100.0f);
			if (k == 2)
				CU_ASSERT(r.s.n_logit_bias == 2);
			chat_request_free(&r);
		}
		for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			snprintf(body, sizeof(body), "{" M U ",\"logit_bias\":%s}", bad[k]);
			CU_ASSERT_EQUAL(parse(body, &r, &e), -1);
			CU_ASSERT_STRING_EQUAL(e.param, "logit_bias");
			chat_request_free(&r);
		}
	}
	/* response_format: each type taken sets its format */
	{
		struct chat_request r;
		struct api_error e;

		CU_ASSERT_EQUAL(parse("{" M U ",\"response_format\":{\"type\":\"json_object\"}}", &r, &e), 0);
		CU_ASSERT_EQUAL(r.format, CHAT_FORMAT_JSON_OBJECT);
		chat_request_free(&r);
		CU_ASSERT_EQUAL(parse("{" M U ",\"response_format\":{\"type\":\"json_schema\","
				      "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}}",
				      &r, &e), 0);
		CU_ASSERT_EQUAL(r.format, CHAT_FORMAT_JSON_SCHEMA);
		CU_ASSERT(json_is_object(r.json_schema));
		chat_request_free(&r);
		CU_ASSERT_EQUAL(parse("{" M U ",\"response_format\":{\"type\":\"text\"}}", &r, &e), 0);
		CU_ASSERT_EQUAL(r.format, CHAT_FORMAT_TEXT);
		chat_request_free(&r);
		CU_ASSERT_EQUAL(parse("{" M U "}", &r, &e), 0);
		CU_ASSERT_EQUAL(r.format, CHAT_FORMAT_TEXT);
		chat_request_free(&r);
	}
	/* reasoning budgets: 0 turns thinking off, N > 0 bounds it, -1 is
	 * the default; the two names must agree */
	{
		static const struct { const char *kv; int rc; enum chat_thinking think; uint32_t budget; } bt[] = {
			{ "\"thinking_budget_tokens\":0", 0, CHAT_THINK_OFF, 0 },
			{ "\"thinking_budget_tokens\":100", 0, CHAT_THINK_DEFAULT, 100 },
			{ "\"reasoning_budget_tokens\":7", 0, CHAT_THINK_DEFAULT, 7 },
			{ "\"reasoning_budget_tokens\":0", 0, CHAT_THINK_OFF, 0 },
			{ "\"thinking_budget_tokens\":-1", 0, CHAT_THINK_DEFAULT, 0 },
			{ "\"thinking_budget_tokens\":5,\"reasoning_budget_tokens\":5", 0,
			  CHAT_THINK_DEFAULT, 5 },
			{ "\"thinking_budget_tokens\":5,\"reasoning_budget_tokens\":6", -1, 0, 0 },
			{ "\"thinking_budget_tokens\":-2", -1, 0, 0 },
		};
		struct chat_request r;
		struct api_error e;

		for (size_t k = 0; k < sizeof(bt) / sizeof(bt[0]); k++) {
			int rc;

			snprintf(body, sizeof(body), "{" M U ",%s}", bt[k].kv);
			rc = parse(body, &r, &e);
			if (rc != bt[k].rc)
				fprintf(stderr, "\nbudget %s: rc %d %s\n", bt[k].kv, rc, rc ? e.message : "");
			CU_ASSERT_EQUAL(rc, bt[k].rc);
			if (!rc)
				CU_ASSERT(r.thinking == bt[k].think && r.think_budget == bt[k].budget);
			chat_request_free(&r);
		}
	}
	/* a value refused on purpose says which parameter and why */
	{
		struct chat_request r;
		struct api_error e;

		CU_ASSERT_EQUAL(parse("{" M U ",\"verbosity\":\"low\"}", &r, &e), -1);
		CU_ASSERT_STRING_EQUAL(e.param, "verbosity");
		CU_ASSERT(e.code && !strcmp(e.code, "unsupported_value"));
		CU_ASSERT_PTR_NOT_NULL(strstr(e.message, "'low' for 'verbosity': this model"));
		chat_request_free(&r);
		CU_ASSERT_EQUAL(parse("{" M U ",\"verbosity\":\"loud\"}", &r, &e), -1);
		CU_ASSERT(!e.code || strcmp(e.code, "unsupported_value"));
		CU_ASSERT_PTR_NOT_NULL(strstr(e.message, "'loud'"));
		chat_request_free(&r);
	}
	/* a tool message must name the call it answers */
	{
		struct chat_request r;
		struct api_error e;

		CU_ASSERT_EQUAL(parse("{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
				      CALL("c1", "f") ",{\"role\":\"tool\",\"content\":\"r\"}]}",
				      &r, &e), -1);
		CU_ASSERT_STRING_EQUAL(e.param, "messages[2].tool_call_id");
		CU_ASSERT_PTR_NOT_NULL(strstr(e.message, "Missing"));
		chat_request_free(&r);
		CU_ASSERT_EQUAL(parse("{" M U ",\"stop\":null}", &r, &e), 0);
		CU_ASSERT_EQUAL(r.s.n_stop, 0);
		chat_request_free(&r);
	}
	/* an assistant tool call must say its arguments */
	{
		struct chat_request r;
		struct api_error e;

		CU_ASSERT_EQUAL(parse("{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
				      "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
				      "\"function\",\"function\":{\"name\":\"f\"}}]}]}", &r, &e), -1);
		CU_ASSERT_STRING_EQUAL(e.param, "messages[1].tool_calls[0].function.arguments");
		chat_request_free(&r);
	}
}

/* Null where a list may be absent, and strings kept with a request
 * (the front ends that convert their shapes keep what they build). */
static void test_request_kept(void)
{
	struct chat_request r;
	struct api_error e;
	const char *k1, *k2;

	CU_ASSERT_EQUAL_FATAL(parse("{" M "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
				    "{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":null}]}",
				    &r, &e), 0);
	CU_ASSERT_EQUAL(r.msgs[1].n_calls, 0);
	k1 = chat_request_keep(&r, "kept text", 4);
	k2 = chat_request_keep(&r, "", 0);
	CU_ASSERT(k1 && !strcmp(k1, "kept"));
	CU_ASSERT(k2 && !*k2);
	chat_request_free(&r);
}

/* ---------------------------------------------------------------- template */

static char *render_body(const char *body)
{
	struct chat_request r;
	struct api_error e;
	struct chat_prompt p = { 0 };
	struct chat_conv c;
	char err[200];
	char *s;

	if (parse(body, &r, &e)) {
		fprintf(stderr, "\nrender_body: %s\n", e.message);
		chat_request_free(&r);
		return NULL;
	}
	c = (struct chat_conv){ .msgs = r.msgs, .n_msgs = r.n_msgs, .tools = r.tools,
				.n_tools = r.n_tools };
	CU_ASSERT_EQUAL(chat_render(tmpl, &c, &p, err, sizeof(err)), 0);
	chat_request_free(&r);
	s = sb_steal(&p.text, NULL);
	chat_prompt_free(&p);
	return s;
}

static void test_template_text(void)
{
	char *s = render_body("{" M "\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
			      "{\"role\":\"user\",\"content\":\"U\"},"
			      "{\"role\":\"assistant\",\"content\":\"A\"},"
			      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"V\"}]}]}");

	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_STRING_EQUAL(s, "<|im_start|>system\nS<|im_end|>\n"
			       "<|im_start|>user\nU<|im_end|>\n"
			       "<|im_start|>assistant\nA<|im_end|>\n"
			       "<|im_start|>user\nV<|im_end|>\n"
			       "<|im_start|>assistant\n");
	free(s);

	s = render_body("{" M "\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
			"{\"role\":\"user\",\"content\":\"U\"},"
			"{\"role\":\"assistant\",\"content\":\"ok\",\"tool_calls\":["
			"{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}},"
			"{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]},"
			"{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"R1\"},"
			"{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"R2\"}],"
			"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}]}");
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "<|im_start|>system\nS\n\n# Tools\n"));
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}\n</tools>"));
	CU_ASSERT_PTR_NOT_NULL(strstr(s, "<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
				      "<|im_start|>assistant\nok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n"
				      "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
				      "<|im_start|>tool\n<tool_response>\nR1\n</tool_response><|im_end|>\n"
				      "<|im_start|>tool\n<tool_response>\nR2\n</tool_response><|im_end|>\n"
				      "<|im_start|>assistant\n"));
	/* only one system turn: the system message went into the tools one */
	CU_ASSERT_PTR_NULL(strstr(strstr(s, "<|im_end|>"), "<|im_start|>system"));
	free(s);
}

/* ---------------------------------------------------------------- responses */

static void test_responses(void)
{
	struct resp_ctx rc = { .id = "chatcmpl-x", .model = "m", .created = 1700000000 };
	struct tc_result tr;
	struct kvd_usage u = { .prompt_tokens = 10, .cached_tokens = 4, .completion_tokens = 3 };
	const char *text = "ok\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
	struct kvd_top_logprob top[2] = { { 5, -0.1f, "ok", 2 }, { 6, -3.0f, "\xe2\x82", 2 } };
	struct kvd_event ev = { .type = KVD_EV_TOKEN, .text = "ok", .text_len = 2,
				.token = 5, .logprob = -0.1f, .n_top = 2, .top = top };
	json_t *lp, *j, *msg, *call;
	char *s;

	CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, text, strlen(text), &tr), 0);
	lp = json_array();
	json_array_append_new(lp, resp_logprob(&ev));
	s = resp_completion(&rc, &tr, resp_finish_reason(KVD_FINISH_STOP, tr.n_calls),
			    &u, "sess-1", lp);
	CU_ASSERT_PTR_NOT_NULL_FATAL(s);
	j = json_loads(s, 0, NULL);
	free(s);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "object")), "chat.completion");
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "id")), "chatcmpl-x");
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "created")), 1700000000);
	msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(msg, "role")), "assistant");
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(msg, "content")), "ok");
	call = json_array_get(json_object_get(msg, "tool_calls"), 0);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(call, "type")), "function");
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
			       "{\"a\": 1}");
	CU_ASSERT_EQUAL(strncmp(json_string_value(json_object_get(call, "id")), "call_", 5), 0);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
							 "finish_reason")), "tool_calls");
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 13);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(j, "usage"),
								"prompt_tokens_details"), "cached_tokens")), 4);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(j, "kvarena"), "session_id")),
			       "sess-1");
	lp = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"), "content");
	CU_ASSERT_EQUAL(json_array_size(lp), 1);
	/* a partial UTF-8 token: U+FFFD in "token", the bytes exact */
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(lp, 0),
							"top_logprobs"), 1), "token")), "\xef\xbf\xbd\xef\xbf\xbd");
	CU_ASSERT_EQUAL(json_integer_value(json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(lp, 0),
							"top_logprobs"), 1), "bytes"), 0)), 0xe2);
	json_decref(j);

	/* content null when there are only calls */
	tc_result_free(&tr);
	CU_ASSERT_EQUAL_FATAL(tc_parse(tmpl, text + 3, strlen(text + 3), &tr), 0);
	s = resp_completion(&rc, &tr, "tool_calls", &u, NULL, NULL);
	j = json_loads(s, 0, NULL);
	free(s);
	msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
	CU_ASSERT(json_is_null(json_object_get(msg, "content")));
	CU_ASSERT(json_is_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs")));
	/* timings, and no "kv" when nothing came back from the disk tier */
	CU_ASSERT(json_object_get(json_object_get(j, "kvarena"), "timings") == NULL);
	json_decref(j);
	rc.has_timings = 1;
	rc.usage = u;
	s = resp_completion(&rc, &tr, "tool_calls", &u, NULL, NULL);
	j = json_loads(s, 0, NULL);
	free(s);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(j, "kvarena"),
									"timings"), "cache_n")), 4);
	CU_ASSERT(json_object_get(json_object_get(j, "kvarena"), "kv") == NULL);
	json_decref(j);
	/* the turn's KV came back from disk: kvarena.kv says how much, how late */
	rc.usage.restored_tokens = 4;
	rc.usage.restore_stall_ms = 7;
	s = resp_completion(&rc, &tr, "tool_calls", &u, NULL, NULL);
	j = json_loads(s, 0, NULL);
	free(s);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(j, "kvarena"),
									"kv"), "restored_n")), 4);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(json_object_get(j, "kvarena"),
									"kv"), "restore_stall_ms")), 7);
	json_decref(j);
	rc.has_timings = 0;
	memset(&rc.usage, 0, sizeof(rc.usage));

	/* chunks */
	rc.usage_null = 1;
	s = resp_chunk_call(&rc, 1, &tr.calls[0]);
	j = json_loads(s, 0, NULL);
	free(s);
	call = json_array_get(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
							      "delta"), "tool_calls"), 0);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(call, "index")), 1);
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "f");
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "");
	CU_ASSERT(json_is_null(json_object_get(j, "usage")));
	CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
	json_decref(j);
	s = resp_chunk_usage(&rc, &u, "sess-2");
	j = json_loads(s, 0, NULL);
	free(s);
	CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "choices")), 0);
	CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 10);
	json_decref(j);
	s = resp_chunk_content(&rc, "\xc3", 1, NULL);	/* invalid UTF-8 never breaks JSON */
	CU_ASSERT_PTR_NOT_NULL(s);
	free(s);
	tc_result_free(&tr);
}

static void test_error_json(void)
{
	struct api_error e;
	struct kvd_error k = { .kind = KVD_ERR_BUSY, .retry_after_s = 3, .message = "busy" };
	char long_msg[1024];
	char *s;
	json_t *j;

	api_error_from_kvd(&e, &k);
	CU_ASSERT_EQUAL(e.status, 429);
	CU_ASSERT_EQUAL(e.retry_after_s, 3);
	k.kind = KVD_ERR_TOO_LONG;
	api_error_from_kvd(&e, &k);
	CU_ASSERT_EQUAL(e.status, 400);
	CU_ASSERT_STRING_EQUAL(e.code, "context_length_exceeded");
	k.kind = 99;
	api_error_from_kvd(&e, &k);
	CU_ASSERT_EQUAL(e.status, 500);
	/* a message cut in the middle of a multi-byte character */
	memset(long_msg, 'a', sizeof(long_msg));
	for (size_t i = 500; i + 1 < sizeof(long_msg); i += 2)
		memcpy(long_msg + i, "\xc3\xa9", 2);
	long_msg[sizeof(long_msg) - 1] = '\0';
	for (int shift = 0; shift < 2; shift++) {
		api_bad(&e, "p", "%s", long_msg + shift);
		s = api_error_json(&e);
		CU_ASSERT_PTR_NOT_NULL_FATAL(s);
		j = json_loads(s, 0, NULL);
		CU_ASSERT_PTR_NOT_NULL(j);
		json_decref(j);
		free(s);
	}
}

/* ---------------------------------------------------------------- auth */

static void test_auth(void)
{
	const char *ka[] = { "alpha-key-0123456789", "alpha-key-second-000" };
	const char *kb[] = { "beta-key-0123456789x" };
	struct kvd_api_tenant t[] = { { "alpha", 7, ka, 2 }, { "beta", 9, kb, 1 } };
	struct kvd_api_tenant bad;
	const char *shortk[] = { "short" };
	char err[256];
	struct auth_table *a = auth_table_new(t, 2, err, sizeof(err));
	const struct auth_tenant *w;

	CU_ASSERT_PTR_NOT_NULL_FATAL(a);
	CU_ASSERT_EQUAL(auth_table_keys(a), 3);
	w = auth_lookup(a, ka[1], strlen(ka[1]));
	CU_ASSERT(w && w->id == 7 && !strcmp(w->name, "alpha"));
	w = auth_lookup(a, kb[0], strlen(kb[0]));
	CU_ASSERT(w && w->id == 9);
	CU_ASSERT_PTR_NULL(auth_lookup(a, ka[0], strlen(ka[0]) - 1));	/* prefix */
	CU_ASSERT_PTR_NULL(auth_lookup(a, "alpha-key-0123456789z", 21));	/* longer */
	CU_ASSERT_PTR_NULL(auth_lookup(a, "", 0));
	CU_ASSERT_PTR_NULL(auth_lookup(a, "xlpha-key-0123456789", 20));
	auth_table_get(a);
	auth_table_put(a);
	auth_table_put(a);

	bad = t[0];
	bad.keys = shortk;
	bad.n_keys = 1;
	CU_ASSERT_PTR_NULL(auth_table_new(&bad, 1, err, sizeof(err)));
	bad = t[0];
	bad.id = 0;
	CU_ASSERT_PTR_NULL(auth_table_new(&bad, 1, err, sizeof(err)));
	bad = t[0];
	bad.name = "has space";
	CU_ASSERT_PTR_NULL(auth_table_new(&bad, 1, err, sizeof(err)));
	t[1].keys = ka;	/* the same key for two tenants */
	CU_ASSERT_PTR_NULL(auth_table_new(t, 2, err, sizeof(err)));
	t[1].keys = kb;
	t[1].id = 7;
	CU_ASSERT_PTR_NULL(auth_table_new(t, 2, err, sizeof(err)));
}

int main(void)
{
	CU_pSuite s;
	unsigned fails;

	json_set_alloc_funcs(json_malloc_failing, free);
	if (chat_template_new(NULL, 0, NULL, &tmpl, NULL, 0) ||
	    CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("api", NULL, NULL);
	CU_add_test(s, "request: valid", test_request_valid);
	CU_add_test(s, "request: every invalid class", test_request_invalid);
	CU_add_test(s, "request: truncated at every byte", test_request_truncated);
	CU_add_test(s, "request: bounds", test_request_bounds);
	CU_add_test(s, "request: limits, defaults, stored values", test_request_limits);
	CU_add_test(s, "request: what each shape stores", test_request_stored);
	CU_add_test(s, "request: each allocation failing", test_request_oom);
	CU_add_test(s, "request: jansson's allocations failing", test_request_json_oom);
	CU_add_test(s, "request: every limit from both sides", test_request_both_sides);
	CU_add_test(s, "request: ranges from both sides", test_request_ranges);
	CU_add_test(s, "request: null lists, kept strings", test_request_kept);
	CU_add_test(s, "template: exact text", test_template_text);
	CU_add_test(s, "responses: JSON", test_responses);
	CU_add_test(s, "errors: JSON and kvd mapping", test_error_json);
	CU_add_test(s, "auth: keys to tenants", test_auth);
	CU_basic_set_mode(CU_BRM_VERBOSE);
	CU_basic_run_tests();
	fails = CU_get_number_of_failures();
	CU_cleanup_registry();
	chat_template_free(tmpl);
	return fails ? 1 : 0;
}
