// Glob patterns over initializer names (graph/passes/param_patterns.h): matching, list splitting,
// the error for a pattern that matches nothing, and --param-group specs.
#include "graph/passes/param_patterns.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "graph/error.h"

namespace ot {
namespace {

TEST(ParamPatterns, GlobsAndExactNames) {
  EXPECT_TRUE(NameMatches("features.*", "features.0.weight"));
  EXPECT_FALSE(NameMatches("features.*", "classifier.1.weight"));
  EXPECT_TRUE(NameMatches("*.bias", "layer1.0.bn1.bias"));
  EXPECT_FALSE(NameMatches("*.bias", "layer1.0.bn1.bias_extra"));
  EXPECT_TRUE(NameMatches("layer?.0.*", "layer3.0.conv1.weight"));
  EXPECT_FALSE(NameMatches("layer?.0.*", "layer12.0.conv1.weight"));
  EXPECT_TRUE(NameMatches("layer[12].*", "layer2.1.conv2.weight"));
  EXPECT_FALSE(NameMatches("layer[12].*", "layer3.1.conv2.weight"));
  EXPECT_TRUE(NameMatches("layer[!12].*", "layer3.1.conv2.weight"));
  EXPECT_TRUE(NameMatches("layer[1-3]*", "layer3"));
  EXPECT_FALSE(NameMatches("layer[1-3]*", "layer4"));
  EXPECT_TRUE(NameMatches("*", "onnx::Conv_123"));
  EXPECT_TRUE(NameMatches("a*b*c", "axxbyybzc"));
  EXPECT_FALSE(NameMatches("a*b*c", "axxbyybz"));
  EXPECT_FALSE(NameMatches("fc", "fc.weight"));  // a glob matches the whole name
  // An exact name matches itself even where it reads as a glob (an unclosed '[').
  EXPECT_TRUE(NameMatches("w[0", "w[0"));
  EXPECT_TRUE(NameMatches("x[1]", "x[1]"));
}

TEST(ParamPatterns, ListsSplitOutsideBrackets) {
  EXPECT_EQ(SplitPatternList("classifier.*,fc.*"), (std::vector<std::string>{"classifier.*", "fc.*"}));
  EXPECT_EQ(SplitPatternList(" a , ,b "), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SplitPatternList("layer[1,2].*,fc.*"), (std::vector<std::string>{"layer[1,2].*", "fc.*"}));
  EXPECT_TRUE(SplitPatternList("").empty());
}

TEST(ParamPatterns, APatternMatchingNothingNamesItAndSomeInitializers) {
  Graph g;
  for (const char* name : {"c1.weight", "c1.bias", "fc.weight"})
    g.initializers.push_back(HostTensor::FromVector<float>({1.f}, {1}, name));
  EXPECT_EQ(MatchInitializers(g, {"fc.*", "c1.bias"}, "--freeze"),
            (std::vector<std::string>{"c1.bias", "fc.weight"}));
  try {
    MatchInitializers(g, {"c1.*", "head.*"}, "--freeze");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--freeze pattern 'head.*' matches no initializer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'c1.weight'"), std::string::npos) << msg;
  }
}

TEST(ParamPatterns, ParamGroupSpecs) {
  ParamGroup g = ParseParamGroup("features.*,layer[1,2].*:lr=0.1x,wd=0");
  EXPECT_EQ(g.patterns, (std::vector<std::string>{"features.*", "layer[1,2].*"}));
  EXPECT_FLOAT_EQ(g.lr_factor, 0.1f);
  EXPECT_TRUE(std::isnan(g.lr));
  EXPECT_FLOAT_EQ(g.weight_decay, 0.f);
  g = ParseParamGroup("onnx::Conv_1:lr=0.001");  // the last ':' separates the settings
  EXPECT_EQ(g.patterns, (std::vector<std::string>{"onnx::Conv_1"}));
  EXPECT_FLOAT_EQ(g.lr, 0.001f);
  EXPECT_TRUE(std::isnan(g.lr_factor));
  EXPECT_TRUE(std::isnan(g.weight_decay));
  for (const char* bad : {"fc.*", ":lr=2x", "fc.*:", "fc.*:lr=", "fc.*:lr=-1", "fc.*:lr=2y", "fc.*:momentum=0.9",
                          "fc.*:wd=1x"})
    EXPECT_THROW(ParseParamGroup(bad), Error) << bad;
}

}  // namespace
}  // namespace ot
