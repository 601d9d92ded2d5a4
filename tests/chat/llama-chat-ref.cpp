// SPDX-License-Identifier: MIT
/*
 * llama-chat-ref.cpp - the reference for the model families' tests: renders
 * a conversation with llama.cpp's own chat code (common/chat.cpp and its
 * Jinja engine, libllama-common from the peer cache), or parses a reply
 * with llama.cpp's parser for the template's format. Built at test time
 * against tools/bench/engine/fetch-llama.sh's cache; never shipped.
 *
 *   llama-chat-ref render TEMPLATE.jinja CONV.json [now_unix] [think 0|1]
 *       prints the prompt (add_generation_prompt true) and nothing else
 *   llama-chat-ref parse TEMPLATE.jinja CONV.json REPLY.txt
 *       prints {"content", "reasoning_content", "tool_calls": [{name, arguments}]}
 *   llama-chat-ref builtin NAME CONV.json
 *       the prompt from libllama's built-in renderer NAME ("chatml", ...:
 *       llama_chat_apply_template, messages' role and content only)
 *
 * CONV.json is {"messages": [...], "tools": [...]} in OpenAI's shape. Exit
 * status 2 when llama.cpp refuses (the message on stderr).
 */
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "chat.h"
#include "json.h"
#include "llama.h"
#include "peg-parser.h"

static std::string slurp(const char *path)
{
	std::ifstream f(path, std::ios::binary);
	std::stringstream ss;

	ss << f.rdbuf();
	return ss.str();
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		std::fprintf(stderr, "usage: llama-chat-ref render|parse TEMPLATE CONV [...]\n");
		return 1;
	}
	std::string mode = argv[1];
	if (mode == "builtin") {
		common_json conv = common_json::parse(slurp(argv[3]));
		const common_json &msgs = conv.at("messages");
		std::vector<std::string> roles, contents;
		std::vector<llama_chat_message> chat;

		for (size_t i = 0; i < msgs.size(); i++) {
			roles.push_back(msgs.at(i).at("role").get<std::string>());
			contents.push_back(msgs.at(i).at("content").get<std::string>());
		}
		for (size_t i = 0; i < roles.size(); i++)
			chat.push_back({ roles[i].c_str(), contents[i].c_str() });
		std::vector<char> buf(1 << 20);
		int32_t n = llama_chat_apply_template(argv[2], chat.data(), chat.size(), true,
						      buf.data(), (int32_t)buf.size());
		if (n < 0 || n > (int32_t)buf.size()) {
			std::fprintf(stderr, "llama.cpp: llama_chat_apply_template(%s): %d\n", argv[2], n);
			return 2;
		}
		std::fwrite(buf.data(), 1, (size_t)n, stdout);
		return 0;
	}
	try {
		/* the BOS and EOS texts the templates write between messages;
		 * the parser is built as llama.cpp's own tests build it,
		 * without them (with "</s>" Mistral Small 3.2's is not found) */
		auto tmpls = common_chat_templates_init(nullptr, slurp(argv[2]),
							mode == "render" ? "<s>" : "",
							mode == "render" ? "</s>" : "");
		common_json conv = common_json::parse(slurp(argv[3]));
		common_chat_templates_inputs in;

		in.messages = common_chat_msgs_parse_oaicompat(conv.at("messages"));
		if (conv.contains("tools"))
			in.tools = common_chat_tools_parse_oaicompat(conv.at("tools"));
		in.add_generation_prompt = true;
		in.use_jinja = true;
		in.parallel_tool_calls = true;
		if (mode == "parse")	/* reasoning apart, as llama-server's default */
			in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
		if (mode == "render" && argc > 4)
			in.now = std::chrono::system_clock::from_time_t((time_t)std::stoll(argv[4]));
		if (mode == "render" && argc > 5)
			in.enable_thinking = std::string(argv[5]) == "1";
		auto params = common_chat_templates_apply(tmpls.get(), in);
		if (mode == "render") {
			std::fwrite(params.prompt.data(), 1, params.prompt.size(), stdout);
			return 0;
		}
		common_chat_parser_params pp(params);
		pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
		if (!params.parser.empty())
			pp.parser.load(params.parser);	/* as the server does */
		common_chat_msg m = common_chat_parse(slurp(argv[4]), false, pp);
		std::cout << m.to_json_oaicompat().dump() << "\n";
		return 0;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "llama.cpp: %s\n", e.what());
		return 2;
	}
}
