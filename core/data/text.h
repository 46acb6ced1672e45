/* The byte tokenizer's reading of one text file, cut into records as the
 * text reader (paths.c) asks. Internal to core/data. */
#ifndef GIANT_CORE_DATA_TEXT_H
#define GIANT_CORE_DATA_TEXT_H

#include <stdbool.h>

#include "giant/data.h"

/* Appends the byte tokens of the text file at path to w, each record ended
 * by GT_BYTE_DOC_SEP, the file's end ending one too. With each_line every
 * line is a record; otherwise a line reading exactly separator_line ends
 * one ("" : an empty line; NULL: none, the file is one record). */
gt_status gt_text_tokenize_file(gt_tokfile_writer *w, const char *path, const char *separator_line,
                                bool each_line);

#endif
