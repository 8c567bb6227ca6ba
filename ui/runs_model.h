// The finished runs of a session as a table model: one row a run, its config named by what tells it apart from the
// other runs, and its figures. The compare dock's table, the overlay's selection, the text evaluation's configs, the
// CSV export and the session file all read it.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <QVector>
#include <functional>
#include <optional>

#include "snapshots.h"

namespace kvscope::ui {

/// Short names for a set of configs: the backend and the options whose values differ between the runs (every
/// option's resolved value, defaults included: an omitted default does not hide a 4-bit config behind "quanto").
/// `common` receives what every run shares, "" when there is one run or none. Names read "quanto: nbits=2,
/// q_group_size=32" (spaces, so that a narrow column wraps them); the runs' tooltips keep their SPECs.
QStringList configNames(const QVector<RunSnapshotPtr>& runs, QString* common = nullptr);
/// configNames() of configs given as SPECs (a text evaluation's rows, the tuner's candidates); a label that is no
/// SPEC is kept as it is.
QStringList specNames(const QStringList& specs, QString* common = nullptr);

/// Why the error views have nothing for `run` ("nothing quantized yet in run #3: kivi keeps the newest 128 tokens in
/// full precision; 40 prompt + 12 generated tokens so far"), for views that must not show another run's data instead.
QString nothingQuantizedReason(const RunSnapshot& run);

/// Bits a run's cache stores per cached value, scales, residual window and unquantized layers included: the model
/// dtype's bits ÷ the compression ratio (eval's and tune's bits per value). nullopt where either is unknown.
std::optional<double> storedBitsPerValue(const RunSnapshot& run);

/// Whether a run's figures cannot be trusted: its cache stored NaN/inf codes, or its KL or reference perplexity is not
/// finite. Such a run never ranks best (the table's sort, the sweep's best).
bool brokenRun(const RunSnapshot& run);

class RunsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Run,
    Config,
    KvMiB,
    Ratio,
    BitsPerValue,
    DecodeTokS,
    MeanKl,
    Fits,
    Top1,
    FirstDivergence,
    MaxKl,
    Perplexity,
    ColumnCount
  };

  explicit RunsModel(QObject* parent = nullptr);

  void append(const RunSnapshotPtr& run);
  void setRuns(const QVector<RunSnapshotPtr>& runs);
  const QVector<RunSnapshotPtr>& runs() const { return runs_; }
  RunSnapshotPtr run(int row) const { return runs_.value(row); }
  /// The row of run number `runId`; -1 when the table has none.
  int rowOf(int runId) const;
  /// The config column's text of `row` (configNames).
  QString name(int row) const { return names_.value(row); }
  /// What every run shares ("" for fewer than two runs), shown above the table.
  QString commonConfig() const { return common_; }
  /// The table as CSV: the header, then a row per run (full labels in the config column).
  QString csv() const;

  /// What fits of a run's config (the Capacity page's fit(): tokens for the sort, text for the cell, the requests,
  /// and why when there is no figure) and the settings it assumes in words (the header's tooltip).
  struct FitCell {
    std::optional<double> tokens, requests;
    QString text, why;
  };
  void setFits(std::function<FitCell(const RunSnapshot&)> fits, const QString& settings);
  /// The fits changed (the Capacity page's settings): the column is redrawn.
  void refreshFits(const QString& settings);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  /// Sorts by a column; a run that stored NaN/inf codes or has a non-finite figure goes last in either order (it
  /// never ranks best), as do runs without the figure ("-").
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

 private:
  QString cell(int row, int column, bool fullLabel) const;
  void rename();

  QVector<RunSnapshotPtr> runs_;
  std::function<FitCell(const RunSnapshot&)> fits_;
  QString fitSettings_;
  QStringList names_;
  QString common_;
};

}  // namespace kvscope::ui
