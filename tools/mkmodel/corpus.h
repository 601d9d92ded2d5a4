/* SPDX-License-Identifier: MIT */
/*
 * corpus.h - the text the model maker learns its tokenizer vocabularies
 * from. Written for this project; any English-like text would do. Kept
 * small so vocabulary learning takes milliseconds.
 */
#ifndef KVA_MKMODEL_CORPUS_H
#define KVA_MKMODEL_CORPUS_H

static const char mkmodel_corpus[] =
	"The arena hands out memory in blocks of a fixed size, and every block "
	"has a number. A session keeps a table of the blocks it owns, in the "
	"order of the tokens they hold. When the prefill worker has read the "
	"prompt, it writes the keys and the values of every layer into those "
	"blocks, and the decode worker reads them in place, without a copy. "
	"Two sessions that start with the same prompt can share the blocks of "
	"that prefix: the table of the second one simply names the blocks of "
	"the first. The engine never frees a block; the daemon does that when "
	"the last session that names it is gone. "
	"Decoding is limited by how fast the weights can be read from memory. "
	"Reading each weight once for the whole batch of sessions, instead of "
	"once for every session, is what makes a batch faster than the sum of "
	"its parts. The kernels therefore keep a small tile of rows and tokens "
	"in registers while they stream through the matrix. "
	"She said it's the third time they've tried, and we'll see if it's "
	"going to work; I'd rather they'd tested it first. 12 blocks, 345 "
	"tokens, 6789 bytes: numbers are words too. Hello, world! (brackets), "
	"[lists], {braces}, \"quotes\", and dashes - like this - all appear. "
	"the the the of of of and and and to to to in in in is is is it it it "
	"token tokens tokenizer tokenization layer layers head heads block "
	"blocks session sessions memory memories model models weight weights "
	"Caf\xc3\xa9 na\xc3\xaf" "ve r\xc3\xa9sum\xc3\xa9 \xc3\xbc" "ber Stra\xc3\x9f" "e "
	"\n\nNew lines\tand tabs\tare text as well.\n";

#endif
