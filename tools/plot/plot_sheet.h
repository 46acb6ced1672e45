/* giant-plot's drawing: the sheet of a training job's metrics, drawn by
 * gnuplot from a script and data files written to a scratch directory. */
#ifndef GIANT_TOOLS_PLOT_SHEET_H
#define GIANT_TOOLS_PLOT_SHEET_H

#include "tools/plot/plot_data.h"

typedef struct plot_sheet_opts {
  const char *png; /* where the PNG goes (required) */
  const char *svg; /* and the SVG, or NULL */
  const char *title;
  int width, height; /* pixels */
} plot_sheet_opts;

/* Where gnuplot is: $GIANT_GNUPLOT, else gnuplot on PATH; NULL (with a
 * message naming the package) when there is none. */
const char *plot_find_gnuplot(char *buf, size_t n);
/* Draws d. 0 on success; -1 with the reason printed. */
int plot_sheet(const plot_data *d, const plot_sheet_opts *o, const char *gnuplot);

#endif
