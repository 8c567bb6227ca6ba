// What the docks' plots share: their minimum size, legend and axis setup, and the colour maps of error cells (NaN/inf
// in a colour of its own). Only the docks' sources include it.
#pragma once

#include <QColor>
#include <QSize>
#include <QString>
#include <cstdint>

class QCPAxis;
class QCPColorMap;
class QCustomPlot;

namespace kvscope::ui {

/// Bytes as MiB.
double mib(std::int64_t b);

/// What a plot may shrink to: the window's minimum height adds up the docks' minimums, and it has to fit a 1366x768
/// screen. Plots take what room there is above this.
inline const QSize kPlotMin(240, 140);

/// The colour of a cell whose value is not finite (the cache stored NaN/inf there): no colour of the thermal scale.
inline const QColor kNanColour(230, 0, 230);

/// The legend below the axes, in `columns` columns, so that it never covers the data.
void legendBelow(QCustomPlot* plot, int columns);

/// A log axis over whole decades (10^k to 10^m, at least one decade), so that a range such as V scales of 1e-3..3e-3
/// still has labelled ticks; labels as 10^k, one a decade where the axis is tall enough (16 px a decade).
void wholeDecades(QCPAxis* axis);

/// Cells are whole layers, heads or channels: integer ticks only.
void integerTicks(QCPAxis* axis);

/// A colour map without interpolation on the plot's axes, with a labelled thermal scale beside it; NaN cells are
/// transparent.
QCPColorMap* addColorMap(QCustomPlot* plot, const QString& label);

/// Empties a colour map and hides its scale: a view with nothing to show shows no colours.
void clearColorMap(QCPColorMap* map);

/// A layer over a colour map that paints the cells set to 1 in kNanColour and leaves the others (NaN) transparent.
QCPColorMap* addNanLayer(QCustomPlot* plot);

/// The colour range over the finite cells only (QCustomPlot's own rescale starts from the first cell, which may be
/// NaN); [0, 1] when none is finite. Shows the map's scale.
void setFiniteDataRange(QCPColorMap* map);

}  // namespace kvscope::ui
